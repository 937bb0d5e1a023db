//go:build !(linux || darwin || freebsd)

package node

// freeSpace is not measured on this system: --min-free-disk has no effect.
func freeSpace(string) func() (uint64, error) { return nil }
