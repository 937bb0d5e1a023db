//go:build linux || darwin || freebsd

package node

import "syscall"

// fileLimit is the process's soft limit on open file descriptors (which
// Go's runtime raises to the hard limit at start), or 0 if unknown.
func fileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}
