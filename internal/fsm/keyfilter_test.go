package fsm

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

func TestBlockedBloom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int64
		keys     int     // added
		maxFP    float64 // share of other keys it may claim
	}{
		{"at capacity", 50_000, 50_000, 0.02},
		{"half full", 50_000, 25_000, 0.005},
		{"twice over", 20_000, 40_000, 0.15}, // degrades, never lies
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBloom(tc.capacity)
			for i := range tc.keys {
				b.add(fmt.Appendf(nil, "key-%d", i))
			}
			for i := range tc.keys {
				require.True(t, b.has(fmt.Appendf(nil, "key-%d", i)), "key-%d was added", i)
			}
			fp := 0
			const probes = 50_000
			for i := range probes {
				if b.has(fmt.Appendf(nil, "other-%d", i)) {
					fp++
				}
			}
			require.Less(t, float64(fp)/probes, tc.maxFP, "false positives: %d of %d", fp, probes)
			require.EqualValues(t, tc.keys, b.count.Load())
		})
	}
}

// openUncached opens a store without the item cache, which would answer
// for the keys apply just wrote before the filter is asked.
func openUncached(t *testing.T, dir string) *FSM {
	t.Helper()
	f, err := Open(dir, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{ItemCacheBytes: -1})
	require.NoError(t, err)
	return f
}

// settle waits for the filter build in progress, if any (the test is the
// apply goroutine here, so it may read the build).
func settle(f *FSM) {
	if bl := f.keys.build; bl != nil {
		<-bl.done
	}
}

func setPrefixed(t *testing.T, a *applier, prefix string, n, batch int) {
	t.Helper()
	for i := 0; i < n; i += batch {
		var ents []Entry
		for j := i; j < min(i+batch, n); j++ {
			ents = append(ents, a.entry(set(command.OpSet, fmt.Sprintf("%s%06d", prefix, j), "v")))
		}
		res, err := a.f.Apply(ents)
		require.NoError(t, err)
		for _, r := range res {
			require.Equal(t, command.StatusStored, r.Status)
		}
	}
}

func requireKeys(t *testing.T, f *FSM, prefix string, n int, found bool) {
	t.Helper()
	for i := range n {
		k := fmt.Sprintf("%s%06d", prefix, i)
		_, ok, err := f.Get([]byte(k), t0)
		require.NoError(t, err)
		require.Equal(t, found, ok, "key %s", k)
	}
}

// The filter answers misses without Pebble and never hides a stored key:
// after writes, after a restart (rebuilt by a scan), after it outgrows its
// size (rebuilt larger) and after flush_all.
func TestKeyFilterKeepsEveryKey(t *testing.T) {
	dir := t.TempDir()
	f := openUncached(t, dir)
	a := &applier{t: t, f: f}
	settle(f)
	require.NotNil(t, f.keys.cur.Load(), "a filter is built at open")

	setPrefixed(t, a, "a", 3000, 100)
	skips0 := f.Stats().KeyFilterSkips
	require.GreaterOrEqual(t, skips0, uint64(2900), "writes of new keys skipped Pebble's read of the old item")
	requireKeys(t, f, "a", 3000, true)
	requireKeys(t, f, "missing", 3000, false)
	require.GreaterOrEqual(t, f.Stats().KeyFilterSkips-skips0, uint64(2900), "gets of missing keys skipped Pebble")

	// A restart builds the filter from a scan of the store.
	require.NoError(t, f.Close())
	f = openUncached(t, dir)
	a.f = f
	settle(f)
	requireKeys(t, f, "a", 3000, true)
	small := f.Stats().KeyFilterBytes

	// More keys than it was sized for: a larger one is built while apply
	// goes on, and nothing is lost across the switch.
	setPrefixed(t, a, "b", 3*minFilterKeys, 500)
	settle(f)
	require.Greater(t, f.Stats().KeyFilterBytes, small, "the filter grew")
	requireKeys(t, f, "a", 3000, true)
	requireKeys(t, f, "b", 3*minFilterKeys, true)

	// flush_all empties the store; the next filter is rebuilt from nothing,
	// and keys written after it are found.
	require.Equal(t, command.StatusOK, a.do(command.Command{Op: command.OpFlush}).Status)
	setPrefixed(t, a, "c", 100, 10)
	settle(f)
	requireKeys(t, f, "a", 3000, false)
	requireKeys(t, f, "c", 100, true)
	require.NoError(t, f.Close())
}

// Readers on other goroutines never miss a key applied before their read,
// while apply writes new keys and the filter is rebuilt under them.
func TestKeyFilterUnderConcurrentReads(t *testing.T) {
	f := openUncached(t, t.TempDir())
	defer func() { require.NoError(t, f.Close()) }()
	settle(f)
	const n = 4 * minFilterKeys // two rebuilds by growth
	rs := startReaders(4, func(r int) func() error {
		rng := rand.New(rand.NewPCG(uint64(r), 1))
		return func() error {
			applied := f.AppliedIndex() // key i is written at index i+1
			if applied == 0 {
				return nil
			}
			k := fmt.Sprintf("k%06d", rng.Uint64N(applied))
			if _, ok, err := f.Get([]byte(k), t0); err != nil || !ok {
				return fmt.Errorf("key %s applied at or before %d: found %v, err %v", k, applied, ok, err)
			}
			return nil
		}
	})
	a := &applier{t: t, f: f}
	setPrefixed(t, a, "k", n, 64)
	settle(f)
	rs.finish(t)
	requireKeys(t, f, "k", n, true)
	require.GreaterOrEqual(t, f.Stats().KeyFilterBytes, int64(n*bloomBitsPerKey/8))
}

// A snapshot install replaces the whole store: the filter of the old one
// must not answer for the new one, even before the new one's scan is done.
func TestKeyFilterAfterInstall(t *testing.T) {
	root := t.TempDir()
	leader := openUncached(t, filepath.Join(root, "leader"))
	defer func() { require.NoError(t, leader.Close()) }()
	const n = 20_000
	setPrefixed(t, &applier{t: t, f: leader}, "new", n, 1000)
	ck := filepath.Join(root, "incoming")
	applied, err := leader.Checkpoint(ck)
	require.NoError(t, err)

	follower := openUncached(t, filepath.Join(root, "follower"))
	defer func() { require.NoError(t, follower.Close()) }()
	setPrefixed(t, &applier{t: t, f: follower}, "old", 100, 100)
	settle(follower)
	require.NoError(t, follower.InstallSnapshot(ck, applied))
	for i := n - 1; i >= 0; i-- { // the keys its scan reaches last, first
		k := fmt.Sprintf("new%06d", i)
		_, ok, err := follower.Get([]byte(k), t0)
		require.NoError(t, err)
		require.True(t, ok, "key %s of the installed state", k)
	}
}
