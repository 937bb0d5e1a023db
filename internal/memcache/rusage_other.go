//go:build !unix

package memcache

// appendRusage: no getrusage here, so no rusage_user and rusage_system.
func appendRusage(func(name, value string)) {}
