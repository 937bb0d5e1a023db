package timerslack

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEnsureAfterASignalDoesNotExecute: a SIGTERM that came before Ensure
// cancelled the first image's context; executing kvd again would start an
// image that knows nothing of it and runs on. Were Ensure to execute this
// test binary again, the new image would run the tests with the marker
// set, and this test would fail there.
func TestEnsureAfterASignalDoesNotExecute(t *testing.T) {
	require.Empty(t, os.Getenv(marker), "this test binary was executed again")
	cur, err := Current()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Ensure(ctx, cur+time.Microsecond, slog.New(slog.DiscardHandler))
	after, err := Current()
	require.NoError(t, err)
	require.Equal(t, cur, after, "the slack was changed")
}
