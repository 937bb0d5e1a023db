//go:build linux || darwin || freebsd

package node

import (
	"fmt"
	"syscall"
)

// freeSpace measures the bytes an unprivileged writer may still use on the
// filesystem holding dir (Bavail, not Bfree: kvd does not run on the root
// reserve).
func freeSpace(dir string) func() (uint64, error) {
	return func() (uint64, error) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return 0, fmt.Errorf("statfs %s: %w", dir, err)
		}
		return uint64(st.Bavail) * uint64(st.Bsize), nil
	}
}
