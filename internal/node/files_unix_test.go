//go:build linux || darwin || freebsd

package node

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFileLimitIsRead: the limit the budget starts from is the process's
// own soft limit.
func TestFileLimitIsRead(t *testing.T) {
	var rl syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl))
	require.Positive(t, fileLimit())
	require.Equal(t, uint64(rl.Cur), fileLimit())
}
