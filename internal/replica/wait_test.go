package replica

import (
	"encoding/binary"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/raftlog"
)

// TestUnwaitedProposalsGiveBackTheirPlaces: a proposal counts against
// MaxPending until its outcome is delivered, whether or not its proposer
// ever waits for it; proposals nobody waited for used to keep their places
// for good, until every proposal was refused as busy.
func TestUnwaitedProposalsGiveBackTheirPlaces(t *testing.T) {
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	sm := &echoSM{}
	r, err := Start(Config{ID: 1, Peers: []NodeID{1}, TickInterval: 10 * time.Millisecond, MaxPending: 2},
		l, sm, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() {
		r.Stop()
		<-r.Done()
		require.NoError(t, l.Close())
	})
	require.Eventually(t, func() bool { return r.Status().Ready }, 10*time.Second, 5*time.Millisecond)
	ctx := t.Context()
	for round := range 3 {
		var last uint64
		for i := range 2 {
			id := uint64(1000*round + i + 1)
			_, err := r.Propose(ctx, id, binary.BigEndian.AppendUint64(nil, id))
			require.NoError(t, err, "round %d proposal %d", round, i)
			last = id
		}
		// Not waited for: once applied they must leave the count.
		require.Eventually(t, func() bool { return sm.AppliedIndex() > 0 && r.waits.size() == 0 }, 10*time.Second, time.Millisecond,
			"round %d: last request %d", round, last)
	}
}
