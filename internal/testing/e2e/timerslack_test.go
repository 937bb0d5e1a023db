package e2e

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
	"github.com/kvd-project/kvd/internal/timerslack"
)

// TestServeRunsWithItsTimerSlack starts real kvd processes and reads the
// timer slack the kernel gives them: --timer-slack's (1ms by default), or
// the one kvd was started with under --timer-slack 0. The value read is
// the main thread's, the one that executed kvd again; every other thread
// is created after it and inherits it. Each process then serves a write
// and a read, under the process ID and the name it was started with.
func TestServeRunsWithItsTimerSlack(t *testing.T) {
	if !timerslack.Supported {
		t.Skip("timer slack is Linux only")
	}
	own, err := timerslack.Current()
	require.NoError(t, err)
	require.NotEqual(t, time.Millisecond, own, "the test needs a slack of its own other than kvd's default")
	cases := []struct {
		name string
		args []string
		want time.Duration
	}{
		{"default", nil, time.Millisecond},
		{"set", []string{"--timer-slack", "300us"}, 300 * time.Microsecond},
		{"inherited", []string{"--timer-slack", "0"}, own},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := kvdproc.Start(t, t.TempDir(), tc.args...)
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/timerslack_ns")
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				t.Skipf("this kernel does not show a process's timer slack: %v", err)
			}
			require.NoError(t, err)
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			require.NoError(t, err)
			require.Equal(t, tc.want, time.Duration(ns))
			// The kernel names a process after the file it executed: ps and
			// pgrep must still find kvd by its binary's name.
			comm, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/comm")
			require.NoError(t, err)
			require.Equal(t, filepath.Base(kvdproc.Binary(t)), strings.TrimSpace(string(comm)))

			c := dial(t, p.MemcacheAddr)
			c.send("set slack 0 0 2\r\nok\r\nget slack\r\n")
			require.Equal(t, "STORED", c.line())
			require.Equal(t, "VALUE slack 0 2", c.line())
			require.Equal(t, "ok", c.line())
			require.Equal(t, "END", c.line())
		})
	}
}
