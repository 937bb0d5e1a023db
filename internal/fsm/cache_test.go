package fsm

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

func openWithCache(t *testing.T, itemCache int64) *FSM {
	t.Helper()
	f, err := Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)), Options{ItemCacheBytes: itemCache})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// The item cache changes nothing a client can observe: the same random
// commands, applied in random batches, give the same results and the same
// reads with a small cache (about 9 entries a shard for 23 keys a shard:
// constant eviction), the default one, and none.
func TestItemCacheIsInvisible(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			stores := []*FSM{openWithCache(t, -1), openWithCache(t, 64<<10), openWithCache(t, 0)}
			rng := rand.New(rand.NewPCG(seed, 0))
			keys := make([]string, 1500)
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%04d", i)
			}
			var index uint64
			var peak int64 // the default cache's largest size after a round
			now := t0
			for round := 0; round < 200; round++ {
				now += int64(rng.IntN(400)) * 1e6 // expiries pass during the run
				ents := randomBatch(t, rng, keys, now, &index)
				want, err := stores[0].Apply(ents)
				require.NoError(t, err)
				for _, f := range stores[1:] {
					got, err := f.Apply(ents)
					require.NoError(t, err)
					require.Equal(t, want, got, "round %d", round)
				}
				// Read the keys just written, and now and then all of them.
				read := make([]string, 0, len(ents))
				if round%20 == 19 {
					read = keys
				} else {
					for _, e := range ents {
						var c command.Command
						require.NoError(t, command.Decode(e.Data, &c))
						for _, kc := range c.Accessed {
							read = append(read, string(kc.Key))
						}
						if len(c.Key) > 0 {
							read = append(read, string(c.Key))
						}
					}
				}
				for _, k := range read {
					wantIt, wantOK, err := stores[0].Get([]byte(k), now)
					require.NoError(t, err)
					for _, f := range stores[1:] {
						it, ok, err := f.Get([]byte(k), now)
						require.NoError(t, err)
						require.Equal(t, wantOK, ok, "round %d key %s", round, k)
						require.Equal(t, wantIt, it, "round %d key %s", round, k)
					}
				}
				_, _, _, bytes := stores[2].cache.stats()
				peak = max(peak, bytes)
			}
			// Not its size at the end: a flush_all in the last round empties
			// it, and the key filter then answers the reads of missing keys.
			hits, _, _, _ := stores[2].cache.stats()
			require.Positive(t, hits, "the default cache was used")
			require.Positive(t, peak, "the default cache held items")
			smallHits, _, _, small := stores[1].cache.stats()
			require.Positive(t, smallHits, "the small cache was used")
			require.LessOrEqual(t, small, int64(64<<10), "the small cache stayed within its bound")
		})
	}
}

// randomBatch encodes one to eight random commands stamped now as the
// entries after *index, which it advances.
func randomBatch(t *testing.T, rng *rand.Rand, keys []string, now int64, index *uint64) []Entry {
	t.Helper()
	var ents []Entry
	for n := 1 + rng.IntN(8); n > 0; n-- {
		c := randomCommand(rng, keys, now)
		data, err := command.Encode(nil, &c)
		require.NoError(t, err)
		*index++
		ents = append(ents, Entry{Index: *index, Data: data})
	}
	return ents
}

func randomCommand(rng *rand.Rand, keys []string, now int64) command.Command {
	k := keys[rng.IntN(len(keys))]
	val := fmt.Sprint(rng.IntN(1000))
	exp := []int64{0, 0, 0, 1, 2, -1}[rng.IntN(6)]
	c := command.Command{Key: []byte(k), Value: []byte(val), Exptime: exp, Flags: uint32(rng.IntN(3)),
		MaxSize: 1 << 20, Stamp: now}
	if rng.IntN(4) == 0 {
		randomMeta(rng, keys, &c)
		return c
	}
	switch r := rng.IntN(100); {
	case r < 30:
		c.Op = command.OpSet
	case r < 38:
		c.Op = command.OpAdd
	case r < 44:
		c.Op = command.OpReplace
	case r < 50:
		c.Op = command.OpAppend
	case r < 54:
		c.Op = command.OpPrepend
	case r < 60:
		c.Op, c.CAS = command.OpCAS, uint64(rng.IntN(50))
	case r < 68:
		c.Op, c.Delta = command.OpIncr, uint64(rng.IntN(10))
	case r < 72:
		c.Op, c.Delta = command.OpDecr, uint64(rng.IntN(10))
	case r < 78:
		c.Op = command.OpTouch
	case r < 82:
		c.Op = command.OpGAT
	case r < 97:
		c.Op = command.OpDelete
	default:
		c.Op, c.Delay = command.OpFlush, int64(rng.IntN(2))
	}
	return c
}

// randomMeta makes c one of the meta writes, with random flags.
func randomMeta(rng *rand.Rand, keys []string, c *command.Command) {
	bit := func(m command.MetaFlags) command.MetaFlags {
		if rng.IntN(3) == 0 {
			return m
		}
		return 0
	}
	c.CAS, c.NewCAS = uint64(rng.IntN(50)), uint64(rng.IntN(50))
	c.Vivify, c.Recache = []int64{0, 1, 2, -1}[rng.IntN(4)], []int64{0, 1, 3}[rng.IntN(3)]
	switch rng.IntN(5) {
	case 0:
		c.Op, c.Mode = command.OpMetaStore, "SERAP"[rng.IntN(5)]
		c.Meta = bit(command.MetaHasCAS) | bit(command.MetaHasNewCAS) | bit(command.MetaInvalidate)
	case 1:
		c.Op = command.OpMetaDelete
		c.Meta = bit(command.MetaHasCAS) | bit(command.MetaHasNewCAS) | bit(command.MetaHasTTL) | bit(command.MetaInvalidate) | bit(command.MetaRemoveValue)
	case 2:
		c.Op, c.Delta, c.Initial = command.OpMetaArith, uint64(rng.IntN(10)), uint64(rng.IntN(10))
		c.Meta = bit(command.MetaHasCAS) | bit(command.MetaHasNewCAS) | bit(command.MetaHasTTL) | bit(command.MetaVivify) | bit(command.MetaDecr)
	case 3:
		c.Op = command.OpMetaGet
		c.Meta = bit(command.MetaHasNewCAS) | bit(command.MetaHasTTL) | bit(command.MetaVivify) | bit(command.MetaRecache) | bit(command.MetaWantValue) | bit(command.MetaNoBump)
	default:
		c.Op, c.Key = command.OpAccess, nil
		for range 1 + rng.IntN(3) {
			c.Accessed = append(c.Accessed, command.KeyCAS{Key: []byte(keys[rng.IntN(len(keys))]), CAS: uint64(rng.IntN(50))})
		}
	}
}

// A reader that looked a key up before an apply changed it must not put
// what it read from Pebble, now stale, into the cache.
func TestItemCacheFillLosesToAConcurrentWrite(t *testing.T) {
	c := newItemCache(1 << 20)
	_, ok, seq := c.lookup([]byte("k"))
	require.False(t, ok)
	c.putAll([]cacheWrite{{key: []byte("k"), enc: []byte("new")}})
	c.fill([]byte("k"), []byte("old"), seq)
	enc, ok, _ := c.lookup([]byte("k"))
	require.True(t, ok)
	require.Equal(t, "new", string(enc))

	_, _, seq = c.lookup([]byte("other"))
	c.clear()
	c.fill([]byte("other"), []byte("before the clear"), seq)
	_, ok, _ = c.lookup([]byte("other"))
	require.False(t, ok, "a fill begun before clear must not land")
}

func TestItemCacheStaysWithinItsBudget(t *testing.T) {
	c := newItemCache(1 << 20) // 16 KiB a shard, entries up to 2 KiB
	for i := range 10000 {
		c.putAll([]cacheWrite{{key: fmt.Appendf(nil, "key-%d", i), enc: make([]byte, 100)}})
	}
	_, _, entries, bytes := c.stats()
	require.LessOrEqual(t, bytes, int64(1<<20))
	require.Positive(t, entries)
	// An item larger than an eighth of a shard is not cached, evicts
	// nothing, and still replaces what was cached under its key.
	c.putAll([]cacheWrite{{key: []byte("big"), enc: []byte("small old value")}})
	_, _, before, _ := c.stats()
	c.putAll([]cacheWrite{{key: []byte("big"), enc: make([]byte, 4<<10)}})
	_, ok, _ := c.lookup([]byte("big"))
	require.False(t, ok, "the old value must not survive a write too large to cache")
	_, _, after, _ := c.stats()
	require.Equal(t, before-1, after)
}

// Writes earlier in the same batch are seen by later commands of the batch
// (the cache still holds the state before the batch), and a flush_all in a
// batch hides everything stored before it.
func TestItemCacheWithinOneBatch(t *testing.T) {
	f := openWithCache(t, 0)
	a := &applier{t: t, f: f}
	require.Equal(t, command.StatusStored, a.do(set(command.OpSet, "k", "a")).Status)
	_, ok, err := f.Get([]byte("k"), t0) // cached now
	require.NoError(t, err)
	require.True(t, ok)

	var ents []Entry
	for _, c := range []command.Command{
		set(command.OpAppend, "k", "b"), set(command.OpAppend, "k", "c"),
		{Op: command.OpFlush}, set(command.OpAdd, "k", "d"), set(command.OpAppend, "k", "e"),
	} {
		ents = append(ents, a.entry(c))
	}
	res, err := f.Apply(ents)
	require.NoError(t, err)
	statuses := []command.Status{res[0].Status, res[1].Status, res[2].Status, res[3].Status, res[4].Status}
	require.Equal(t, []command.Status{command.StatusStored, command.StatusStored, command.StatusOK, command.StatusStored, command.StatusStored}, statuses)
	it, ok, err := f.Get([]byte("k"), t0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "de", string(it.Value))
}

// Get hands out the cached bytes themselves, not a copy: appending to the
// value a reader got (as a reply buffer might) must not reach the cache,
// whether the value came from the cache or from Pebble, and a later write
// must not change what an earlier reader holds.
func TestGetSharesTheCacheButCannotWriteIt(t *testing.T) {
	f := openWithCache(t, 1<<20)
	a := &applier{t: t, f: f}
	require.Equal(t, command.StatusStored, a.do(set(command.OpSet, "k", "abc")).Status)
	for _, from := range []string{"cache after the write", "cache after the first get"} {
		it, ok, err := f.Get([]byte("k"), t0)
		require.NoError(t, err, from)
		require.True(t, ok, from)
		require.Equal(t, len(it.Value), cap(it.Value), from)
		grown := append(it.Value, "XYZ"...)
		grown[0] = 'Z'
		again, _, err := f.Get([]byte("k"), t0)
		require.NoError(t, err)
		require.Equal(t, "abc", string(again.Value), from)
		require.Equal(t, "abc", string(it.Value), from)
	}
	held, _, err := f.Get([]byte("k"), t0)
	require.NoError(t, err)
	require.Equal(t, command.StatusStored, a.do(set(command.OpAppend, "k", "def")).Status)
	now, _, err := f.Get([]byte("k"), t0)
	require.NoError(t, err)
	require.Equal(t, "abcdef", string(now.Value))
	require.Equal(t, "abc", string(held.Value), "an apply must not rewrite bytes a reader holds")

	// Read from Pebble (no item cache): the same contract.
	g := openWithCache(t, -1)
	b := &applier{t: t, f: g}
	require.Equal(t, command.StatusStored, b.do(set(command.OpSet, "k", "abc")).Status)
	it, ok, err := g.Get([]byte("k"), t0)
	require.NoError(t, err)
	require.True(t, ok)
	_ = append(it.Value, "XYZ"...)
	again, _, err := g.Get([]byte("k"), t0)
	require.NoError(t, err)
	require.Equal(t, "abc", string(again.Value))
}

// Pebble charges its memtables to the block cache, so a cache sized at
// CacheBytes alone left blocks nothing once the memtables had grown: with
// the defaults, the mutable 32 MiB memtable and the flushed one kept for
// reuse reserved all 64 MiB, and a block was read from its file for every
// key in it. Here a 1 MiB cache and a few MiB of writes (memtables start at
// 256 KiB and double) show the same.
func TestBlockCacheKeepsBlocksBesideTheMemtables(t *testing.T) {
	f, err := Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)), Options{CacheBytes: 1 << 20, ItemCacheBytes: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	const n, batch = 12000, 200
	val := strings.Repeat("v", 512)
	a := &applier{t: t, f: f}
	for i := 0; i < n; i += batch {
		ents := make([]Entry, 0, batch)
		for j := i; j < i+batch; j++ {
			ents = append(ents, a.entry(set(command.OpSet, fmt.Sprintf("k%06d", j), val)))
		}
		_, err := f.Apply(ents)
		require.NoError(t, err)
	}
	require.NoError(t, f.db.Flush()) // the reads below go to sstables
	before := f.Stats()
	requireKeys(t, f, "k", n, true)
	st := f.Stats()
	hits, misses := st.BlockCacheHits-before.BlockCacheHits, st.BlockCacheMisses-before.BlockCacheMisses
	// Keys read in order: a block holds many neighbours, so all but the
	// first read of each block find it cached (none did on the old sizing).
	require.Greater(t, hits, int64(n/2), "block cache hits %d, misses %d", hits, misses)
}
