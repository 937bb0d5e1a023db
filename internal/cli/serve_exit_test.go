package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/kv"
)

// A member removed from its cluster ends kvd serve with ExitRemoved, however
// node.Run wraps the cause, so that a supervisor (kvd.service's
// RestartPreventExitStatus) does not restart it only to see it stop again;
// every other end keeps its error and main's default status.
func TestServeExitStatus(t *testing.T) {
	removed := fmt.Errorf("%w: shutting down (wipe its data dir to join again)", kv.ErrRemoved)
	for _, tc := range []struct {
		name string
		err  error
		code int // 0: no ExitCode in the chain
	}{
		{"clean stop", nil, 0},
		{"removed", removed, ExitRemoved},
		{"removed, shutdown failed too", errors.Join(removed, errors.New("memcache shutdown: context deadline exceeded")), ExitRemoved},
		{"replica failed", errors.New("replica stopped: disk full"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serveExit(tc.err)
			if tc.err == nil {
				require.NoError(t, got)
				return
			}
			require.ErrorIs(t, got, tc.err, "the cause is kept")
			require.Equal(t, tc.err.Error(), got.Error())
			var ec interface{ ExitCode() int }
			if tc.code == 0 {
				require.False(t, errors.As(got, &ec), "no exit status of its own")
				return
			}
			require.True(t, errors.As(got, &ec))
			require.Equal(t, tc.code, ec.ExitCode())
		})
	}
}
