package fsm

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// readObs is one read made concurrently with apply: the applied index
// before and after it, and what it returned.
type readObs struct {
	before, after uint64
	key           string
	got           string
}

// describeRead renders a Get's outcome for comparison.
func describeRead(it command.Item, ok bool) string {
	if !ok {
		return "absent"
	}
	return fmt.Sprintf("%q flags=%d cas=%d exp=%d fetched=%t at=%d stale=%t token=%t", it.Value, it.Flags, it.CAS, it.ExpiresAt,
		it.Fetched, it.AccessedAt, it.Stale, it.TokenSent)
}

// TestReadPathAgainstApplyAndInstall applies random batches to a store
// with a small item cache (constant eviction) while readers Get random
// keys from it, and now and then replaces its state by a snapshot install
// instead of applying the batches. Every read must return the key's state
// at some batch boundary between the applied index before the read and
// the end of the batch in progress after it, as a store without a cache
// (applied in lockstep) says; counters and the digest must match it after
// every step. Keys include 0xff bytes and share prefixes. Bounded: a few
// hundred batches, reads capped per reader.
func TestReadPathAgainstApplyAndInstall(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		for _, cache := range []int64{64 << 10, 0} { // about 9 entries a shard (constant eviction), and the default
			t.Run(fmt.Sprintf("seed%d/cache%d", seed, cache), func(t *testing.T) {
				readPathAgainstApply(t, seed, cache)
			})
		}
	}
}

func readPathAgainstApply(t *testing.T, seed uint64, cache int64) {
	root := t.TempDir()
	ref, err := Open(filepath.Join(root, "ref"), discardLogger(), Options{ItemCacheBytes: -1})
	require.NoError(t, err)
	defer ref.Close()
	sut, err := Open(filepath.Join(root, "sut"), discardLogger(), Options{ItemCacheBytes: cache})
	require.NoError(t, err)
	defer sut.Close()

	keys := make([]string, 0, 48)
	for i := range 16 {
		keys = append(keys, fmt.Sprintf("k%02d", i), fmt.Sprintf("k%02d\xff", i), fmt.Sprintf("\xff\xffk%02d", i))
	}
	const readNow = t0 + 1e9 // expiries and delayed flushes cross it during the run
	snapshot := func(f *FSM) map[string]string {
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			it, ok, err := f.Get([]byte(k), readNow)
			require.NoError(t, err)
			m[k] = describeRead(it, ok)
		}
		return m
	}

	// states[i] is every key's state at batch end ends[i]; published by
	// the applier before it applies the next batch to sut.
	var mu sync.Mutex
	ends := []uint64{0}
	states := []map[string]string{snapshot(ref)}

	const readers, maxReads = 2, 20000
	obs := make([][]readObs, readers)
	rs := startReaders(readers, func(r int) func() error {
		rng := rand.New(rand.NewPCG(seed, uint64(r)+1))
		return func() error {
			if len(obs[r]) >= maxReads {
				return nil
			}
			k := keys[rng.IntN(len(keys))]
			before := sut.AppliedIndex()
			it, ok, err := sut.Get([]byte(k), readNow)
			if err != nil {
				return err
			}
			obs[r] = append(obs[r], readObs{before: before, after: sut.AppliedIndex(), key: k, got: describeRead(it, ok)})
			return nil
		}
	})

	rng := rand.New(rand.NewPCG(seed, 0))
	var index uint64
	now := t0
	skipping := 0 // batches left to skip before the next install
	for round := 0; round < 200; round++ {
		now += int64(rng.IntN(20)) * 1e6
		ents := randomBatch(t, rng, keys, now, &index)
		_, err := ref.Apply(ents)
		require.NoError(t, err)
		st := snapshot(ref)
		mu.Lock()
		ends, states = append(ends, index), append(states, st)
		mu.Unlock()

		if skipping == 0 && rng.IntN(40) == 0 {
			skipping = 1 + rng.IntN(4)
		}
		if skipping > 0 {
			skipping--
			if skipping == 0 {
				ck := filepath.Join(root, fmt.Sprint("ck", round))
				applied, err := ref.Checkpoint(ck)
				require.NoError(t, err)
				require.NoError(t, sut.InstallSnapshot(ck, applied))
			}
		} else {
			_, err = sut.Apply(ents)
			require.NoError(t, err)
		}
		if skipping == 0 {
			want, got := ref.Stats(), sut.Stats()
			require.Equal(t, want.Applied, got.Applied, "round %d", round)
			require.Equal(t, want.Items, got.Items, "items, round %d", round)
			require.Equal(t, want.Bytes, got.Bytes, "bytes, round %d", round)
			require.Equal(t, st, snapshot(sut), "quiescent reads, round %d", round)
		}
		rs.await(50)
	}
	rs.finish(t)
	hits, _, _, _ := sut.cache.stats()
	require.Positive(t, hits, "the item cache answered reads")
	wantD, err := ref.Digest()
	require.NoError(t, err)
	gotD, err := sut.Digest()
	require.NoError(t, err)
	require.Equal(t, wantD, gotD)

	for r := range obs {
		for _, o := range obs[r] {
			// The reader may see the batch committed after its last look
			// at the applied index, not yet published: up to the next end.
			ok := false
			for i, e := range ends {
				if e < o.before {
					continue
				}
				if states[i][o.key] == o.got {
					ok = true
					break
				}
				if e > o.after {
					break
				}
			}
			require.True(t, ok, "reader %d read %q = %s between applied %d and %d: no state in that range has it", r, o.key, o.got, o.before, o.after)
		}
	}
}

// TestReplayAfterCrashMatches crashes a store (power loss: what its
// flushes wrote survives) at random points, reopens it and replays the
// whole log, as a restart does from the compaction point: the replayed
// store must hold exactly what a store that never crashed holds, its
// counters included, and its key filter must call no stored key absent.
func TestReplayAfterCrashMatches(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			keys := make([]string, 0, 60)
			for i := range 30 {
				keys = append(keys, fmt.Sprintf("r%02d", i), fmt.Sprintf("r%02d\xff", i))
			}
			ref := openWithCache(t, -1)
			fs := vfs.NewCrashableMem()
			opts := Options{FS: fs, CacheBytes: 1 << 20, FlushAfterEntries: uint64(5 + rng.IntN(20)), ItemCacheBytes: 64 << 10} // about 9 entries a shard
			f, err := Open("/state", discardLogger(), opts)
			require.NoError(t, err)
			var log []Entry
			now := t0
			for round := 0; round < 120; round++ {
				now += int64(rng.IntN(30)) * 1e6
				var ents []Entry
				for n := 1 + rng.IntN(6); n > 0; n-- {
					c := randomCommand(rng, keys, now)
					data, err := command.Encode(nil, &c)
					require.NoError(t, err)
					ents = append(ents, Entry{Index: uint64(len(log) + len(ents) + 1), Data: data})
				}
				log = append(log, ents...)
				_, err := ref.Apply(ents)
				require.NoError(t, err)
				_, err = f.Apply(ents)
				require.NoError(t, err)
				_, err = f.Sync()
				require.NoError(t, err)
				for _, k := range keys { // fill the item cache
					_, _, err := f.Get([]byte(k), now)
					require.NoError(t, err)
				}
				if rng.IntN(25) != 0 {
					continue
				}
				crashed := fs.CrashClone(vfs.CrashCloneCfg{})
				require.NoError(t, f.Close())
				fs, opts.FS = crashed, crashed
				f, err = Open("/state", discardLogger(), opts)
				require.NoError(t, err)
				from := f.AppliedIndex()
				for i := 0; i < len(log); i += 7 { // replayed in batches, already applied ones included
					_, err := f.Apply(log[i:min(i+7, len(log))])
					require.NoError(t, err)
				}
				require.Equal(t, ref.AppliedIndex(), f.AppliedIndex(), "replayed from %d", from)
				want, got := ref.Stats(), f.Stats()
				require.Equal(t, want.Items, got.Items, "items after replay from %d, round %d", from, round)
				require.Equal(t, want.Bytes, got.Bytes, "bytes after replay from %d, round %d", from, round)
				wantD, err := ref.Digest()
				require.NoError(t, err)
				gotD, err := f.Digest()
				require.NoError(t, err)
				require.Equal(t, wantD, gotD, "round %d", round)
				for _, k := range keys {
					w, wok, err := ref.Get([]byte(k), now)
					require.NoError(t, err)
					g, gok, err := f.Get([]byte(k), now)
					require.NoError(t, err)
					require.Equal(t, wok, gok, "key %q round %d", k, round)
					require.Equal(t, w, g, "key %q round %d", k, round)
				}
			}
			require.NoError(t, f.Close())
		})
	}
}
