package fsm

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// TestSyncReportsOnlyWhatAFlushWrote: the store keeps no WAL, so after a
// power loss it holds what its flushes wrote and nothing applied after
// them. Sync's index is what the raft log gets truncated to, so it must
// never run ahead of that, and it must move once its flush is done.
func TestSyncReportsOnlyWhatAFlushWrote(t *testing.T) {
	fs := vfs.NewCrashableMem()
	// The first 100 sets (about 4 KB of entries) pass the threshold, the
	// 20 after them (under 1 KB) do not.
	opts := Options{FS: fs, CacheBytes: 1 << 20, FlushAfterBytes: 2 << 10}
	f, err := Open("/state", discardLogger(), opts)
	require.NoError(t, err)
	next := setKeys(t, f, 1, 0, 100, "a")
	durable, err := f.Sync()
	require.NoError(t, err)
	require.Zero(t, durable, "nothing was flushed yet")
	flushed := next - 1 // what the flush Sync just started covers
	next = setKeys(t, f, next, 100, 120, "b")

	durable = syncUntil(t, f, flushed)
	require.Equal(t, flushed, durable, "Sync reports the finished flush, and not the entries applied after it")
	require.Equal(t, durable, f.Stats().Durable)
	require.Equal(t, next-1, f.AppliedIndex())

	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	require.NoError(t, f.Close())
	g, err := Open("/state", discardLogger(), Options{FS: crashed, CacheBytes: 1 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close()) }()
	// No other flush ran (the memtable is nowhere near full), so the store
	// holds exactly what Sync reported: the raft log replays the rest.
	require.Equal(t, durable, g.AppliedIndex())
	it, ok, err := g.Get([]byte("key-99"), t0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "a-99", string(it.Value))
	_, ok, err = g.Get([]byte("key-100"), t0)
	require.NoError(t, err)
	require.False(t, ok, "applied after the flush, so lost with the power")
}

// TestCloseLeavesNothingToReplay: a clean close flushes, so a restart finds
// everything applied on disk even though no Sync ever flushed.
func TestCloseLeavesNothingToReplay(t *testing.T) {
	fs := vfs.NewCrashableMem()
	f, err := Open("/state", discardLogger(), Options{FS: fs, CacheBytes: 1 << 20})
	require.NoError(t, err)
	next := setKeys(t, f, 1, 0, 50, "a")
	durable, err := f.Sync()
	require.NoError(t, err)
	require.Zero(t, durable, "far below the default threshold: Sync starts no flush")
	require.NoError(t, f.Close())

	g, err := Open("/state", discardLogger(), Options{FS: fs.CrashClone(vfs.CrashCloneCfg{}), CacheBytes: 1 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close()) }()
	require.Equal(t, next-1, g.AppliedIndex())
	require.Equal(t, next-1, g.Stats().Durable)
}

// TestSyncFlushesByCount: small entries reach FlushAfterEntries long before
// FlushAfterBytes, and the log, compacted up to Sync's index, is meant to be
// compacted every so many entries (--snapshot-count).
func TestSyncFlushesByCount(t *testing.T) {
	f, err := Open(t.TempDir(), discardLogger(), Options{CacheBytes: 1 << 20, FlushAfterEntries: 40})
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	next := setKeys(t, f, 1, 0, 39, "a")
	durable, err := f.Sync()
	require.NoError(t, err)
	require.Zero(t, durable)
	next = setKeys(t, f, next, 39, 40, "a")
	durable = syncUntil(t, f, 1)
	require.Equal(t, next-1, durable, "40 entries applied: one flush, covering them all")
}

// syncUntil calls Sync until it reports at least want, which a flush that
// Sync started makes true once it is done, and returns what it reported.
// The deadline only bounds a test whose flush never finishes.
func syncUntil(t *testing.T, f *FSM, want uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		durable, err := f.Sync()
		require.NoError(t, err)
		if durable >= want || time.Now().After(deadline) {
			return durable
		}
		time.Sleep(time.Millisecond)
	}
}
