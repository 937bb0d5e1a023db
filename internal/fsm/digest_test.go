package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// TestDigestIgnoresBatching: raft hands each node the same entries in
// batches of its own, and Apply writes some bookkeeping once per batch.
// Replicas at the same applied index hold the same state and must report
// the same digest whatever their batches were. A passed delayed flush_all
// replaced by another (cluster version 3: its horizon is kept) and then an
// immediate flush_all took the kept horizon from 0 to t+1s and back to 0:
// applied in one batch, nothing was written; one entry a batch, a 0 was
// (Apply now deletes the key at 0).
func TestDigestIgnoresBatching(t *testing.T) {
	var ents []Entry
	for i, c := range []command.Command{
		{Op: command.OpClusterVersion, ClusterVersion: 3, Stamp: t0},
		{Op: command.OpSet, Key: []byte("k"), Value: []byte("v"), MaxSize: 1 << 20, Stamp: t0},
		{Op: command.OpFlush, Delay: 1, Stamp: t0},
		{Op: command.OpFlush, Delay: 5, Stamp: t0 + 2e9}, // replaces the passed one
		{Op: command.OpFlush, Stamp: t0 + 3e9},           // immediate: ends both
		{Op: command.OpSet, Key: []byte("k2"), Value: []byte("w"), MaxSize: 1 << 20, Stamp: t0 + 4e9},
	} {
		data, err := command.Encode(nil, &c)
		require.NoError(t, err)
		ents = append(ents, Entry{Index: uint64(i + 1), Data: data})
	}
	whole := openWithCache(t, 0)
	_, err := whole.Apply(ents[:3])
	require.NoError(t, err)
	_, err = whole.Apply(ents[3:])
	require.NoError(t, err)
	split := openWithCache(t, 0)
	for i := range ents {
		_, err := split.Apply(ents[i : i+1])
		require.NoError(t, err)
	}
	_, wholeBefore := whole.FlushHorizons()
	_, splitBefore := split.FlushHorizons()
	require.Zero(t, wholeBefore)
	require.Zero(t, splitBefore)
	want, err := whole.Digest()
	require.NoError(t, err)
	got, err := split.Digest()
	require.NoError(t, err)
	require.Equal(t, want, got)
}
