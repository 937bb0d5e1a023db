package fsm

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// TestStatsDoNotWaitForTheStore: an install holds the store's write lock
// while the received store opens (and Close while it flushes); Stats, which
// a metrics scrape, /v1/stats and memcache `stats` read, waited for it, so
// scrapes timed out and lost every series. While the store is held, Stats
// answers with the Pebble figures it last read.
func TestStatsDoNotWaitForTheStore(t *testing.T) {
	f := openTest(t, t.TempDir())
	defer f.Close()
	a := &applier{t: t, f: f}
	a.do(set(command.OpSet, "k", "v"))
	before := f.Stats()
	require.NotZero(t, before.DiskBytes)

	f.dbMu.Lock() // as InstallSnapshot holds it
	got := make(chan Stats, 1)
	go func() { got <- f.Stats() }()
	select {
	case s := <-got:
		require.Equal(t, before.DiskBytes, s.DiskBytes, "the figures last read")
		require.Equal(t, uint64(1), s.Applied)
	case <-time.After(10 * time.Second):
		f.dbMu.Unlock() // before Fatal: Close, deferred, takes it
		t.Fatal("Stats waited for the store's write lock")
	}
	f.dbMu.Unlock()
}

// TestStatsStoreGenCountsReopens: Pebble's cache counters restart at 0 in
// each store an install opens; StoreGen tells the metrics a reopen from an
// older figure served late (which a drop in the counters cannot).
func TestStatsStoreGenCountsReopens(t *testing.T) {
	root := t.TempDir()
	leader := openTest(t, filepath.Join(root, "leader"))
	defer leader.Close()
	(&applier{t: t, f: leader}).do(set(command.OpSet, "k", "v"))
	ck := filepath.Join(root, "incoming")
	applied, err := leader.Checkpoint(ck)
	require.NoError(t, err)

	f := openTest(t, filepath.Join(root, "follower"))
	defer f.Close()
	require.Equal(t, uint64(1), f.Stats().StoreGen)
	require.NoError(t, f.InstallSnapshot(ck, applied))
	require.Equal(t, uint64(2), f.Stats().StoreGen)
}
