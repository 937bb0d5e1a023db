package node

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/replica"
)

// TestEntryFromNewerKvdStopsTheNode: a log entry this binary cannot apply
// (an operation a newer kvd added, proposed in a mixed-version cluster)
// stops the node's replica with an error that says so, on a real data
// directory, rather than letting the node skip what its peers apply. The
// writes before it stay, nothing after it is applied, and a restart on the
// same directory stops at the same entry again instead of skipping it.
func TestEntryFromNewerKvdStopsTheNode(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := openStackAt(t, vfs.Default, dir, logger)
	ctx := context.Background()
	_, err := s.kv.Do(ctx, &command.Command{Op: command.OpSet, Key: []byte("before"), Value: []byte("1")})
	require.NoError(t, err)
	applied := s.sm.AppliedIndex()

	c := command.Command{Op: command.OpSet, Key: []byte("newer"), Value: []byte("2"), ReqID: 1 << 62, Stamp: time.Now().UnixNano()}
	data, err := command.Encode(nil, &c)
	require.NoError(t, err)
	data[1] = 200 // an operation this binary does not know
	p, err := s.rep.Propose(ctx, time.Time{}, c.ReqID, data)
	require.NoError(t, err)
	_, err = p.Wait(ctx, time.Now().Add(10*time.Second))
	// Committed, so a newer kvd applies it: its outcome is unknown here.
	require.ErrorIs(t, err, replica.ErrUnknownOutcome)
	stopped := func(rep *replica.Replica) {
		t.Helper()
		select {
		case <-rep.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the replica kept running past an entry it cannot apply")
		}
		require.ErrorIs(t, rep.Err(), command.ErrUnsupported)
		require.Contains(t, rep.Err().Error(), "run a kvd release that knows it")
	}
	stopped(s.rep)
	require.Equal(t, applied, s.sm.AppliedIndex())
	_, err = s.kv.Do(ctx, &command.Command{Op: command.OpSet, Key: []byte("after"), Value: []byte("3")})
	require.ErrorIs(t, err, replica.ErrStopped)
	s.close()

	// The replica replays the log on its own goroutine: it starts, and
	// stops again at the same entry.
	again := startStack(t, vfs.Default, dir, logger, replica.Config{ID: 1, Peers: []replica.NodeID{1}, TickInterval: 10 * time.Millisecond})
	defer again.close()
	stopped(again.rep)
	require.Equal(t, applied, again.sm.AppliedIndex())
	_, ok, err := again.sm.Get([]byte("before"), time.Now().UnixNano())
	require.NoError(t, err)
	require.True(t, ok)
}
