//go:build !unix

package mcserver

// appendRusage: no getrusage here, so no rusage_user and rusage_system.
func appendRusage(buf []byte) []byte { return buf }
