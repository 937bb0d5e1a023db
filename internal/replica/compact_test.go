package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCompactionWaitsForTheSavedCommit: a leader's Ready commits a whole
// batch at once, with a HardState whose commit index is saved only after
// the batch (already on disk) is applied. Compacting the log during that
// apply asked the log to drop entries past its saved commit index, which it
// refuses, and the node stopped. A state machine that reports what it
// applied as durable at once (echoSM; fsm after a snapshot install) made
// every such batch fatal once compaction was due.
func TestCompactionWaitsForTheSavedCommit(t *testing.T) {
	r := startSolo(t, 0, func(c *Config) { c.CompactEvery, c.CompactKeep = 1, 1 })
	for round := range 3 {
		first := uint64(1 + 100*round)
		release := holdLoop(t, r)
		wait := proposeQueued(t, r, first, 20)
		release()
		for i, err := range wait() {
			require.NoError(t, err, "round %d: proposal %d", round, i)
		}
		require.NoError(t, r.Err(), "round %d", round)
	}
	var compacted uint64
	require.NoError(t, r.do(t.Context(), func() error { compacted = r.lastCompact; return nil }))
	require.NotZero(t, compacted, "the log was never compacted")
}
