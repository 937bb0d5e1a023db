package raftlog

import (
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

func TestTailCache(t *testing.T) {
	// Every cached entry counts 10 bytes.
	add := func(lo, hi uint64) func(c *tailCache) {
		return func(c *tailCache) {
			var ces []cachedEntry
			for _, e := range entries(lo, hi, 1) {
				ces = append(ces, cachedEntry{e: e, size: 10})
			}
			c.append(ces)
		}
	}
	tests := []struct {
		name       string
		maxEntries int
		maxBytes   int64
		ops        []func(c *tailCache)
		want       []uint64
	}{
		{name: "append within bounds", maxEntries: 10, maxBytes: 1000, ops: []func(*tailCache){add(1, 5), add(6, 8)}, want: span(1, 8)},
		{name: "entry bound evicts oldest", maxEntries: 4, maxBytes: 1000, ops: []func(*tailCache){add(1, 5), add(6, 8)}, want: span(5, 8)},
		{name: "byte bound evicts oldest", maxEntries: 100, maxBytes: 35, ops: []func(*tailCache){add(1, 8)}, want: span(6, 8)},
		{name: "entry larger than the byte bound is not kept", maxEntries: 100, maxBytes: 5, ops: []func(*tailCache){add(1, 3)}, want: nil},
		{name: "overwrite tail", maxEntries: 10, maxBytes: 1000, ops: []func(*tailCache){add(1, 8), add(5, 6)}, want: span(1, 6)},
		{name: "overwrite from before the cache", maxEntries: 3, maxBytes: 1000, ops: []func(*tailCache){add(1, 8), add(4, 5)}, want: span(4, 5)},
		{name: "drop through middle", maxEntries: 10, maxBytes: 1000, ops: []func(*tailCache){add(1, 8), func(c *tailCache) { c.dropThrough(5) }}, want: span(6, 8)},
		{name: "drop through all", maxEntries: 10, maxBytes: 1000, ops: []func(*tailCache){add(1, 8), func(c *tailCache) { c.dropThrough(9) }}, want: nil},
		{name: "drop through below", maxEntries: 10, maxBytes: 1000, ops: []func(*tailCache){add(5, 8), func(c *tailCache) { c.dropThrough(2) }}, want: span(5, 8)},
		{name: "truncate then append", maxEntries: 10, maxBytes: 1000, ops: []func(*tailCache){add(1, 8), func(c *tailCache) { c.truncateFrom(4) }, add(4, 4)}, want: span(1, 4)},
		{name: "append not connecting restarts", maxEntries: 10, maxBytes: 1000, ops: []func(*tailCache){add(1, 3), add(7, 8)}, want: span(7, 8)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTailCache(tc.maxEntries, tc.maxBytes)
			for _, op := range tc.ops {
				op(c)
			}
			var got []uint64
			for i := range c.len() {
				ce, ok := c.get(c.firstIndex() + uint64(i))
				require.True(t, ok)
				got = append(got, ce.e.GetIndex())
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, int64(10*len(tc.want)), c.bytes)
			require.LessOrEqual(t, c.len(), tc.maxEntries)
			require.LessOrEqual(t, c.bytes, tc.maxBytes)
			_, ok := c.get(c.firstIndex() + uint64(c.len()))
			require.False(t, ok, "beyond the cache")
		})
	}
}

// Raft reads committed entries back right after appending them: with the
// tail cache those reads, and Term on recent entries, never touch Pebble;
// older entries are still served from disk.
func TestRecentEntriesAreServedFromMemory(t *testing.T) {
	l, dir := openTest(t, Options{TailCacheEntries: 16})
	require.NoError(t, l.Bootstrap(confState(1)))
	for i := uint64(1); i <= 100; i += 10 {
		require.NoError(t, l.Save(hardState(1, 1, i-1), entries(i, i+9, 1)))
		got, err := l.Entries(i, i+10, ^uint64(0))
		require.NoError(t, err)
		require.Equal(t, span(i, i+9), indexes(got))
		for j := i; j < i+10; j++ {
			_, err := l.Term(j)
			require.NoError(t, err)
		}
	}
	st := l.Stats()
	require.Zero(t, st.EntryDiskReads)
	require.Equal(t, 16, st.TailCacheEntries)

	got, err := l.Entries(80, 101, ^uint64(0))
	require.NoError(t, err)
	require.Equal(t, span(80, 100), indexes(got))
	require.Equal(t, uint64(85-80), l.Stats().EntryDiskReads, "80..84 from disk, 85..100 from memory")

	// Reopen fills the cache with the newest entries again.
	require.NoError(t, l.Close())
	l = reopenTest(t, dir, Options{TailCacheEntries: 16})
	st = l.Stats()
	require.Equal(t, 16, st.TailCacheEntries)
	_, err = l.Entries(85, 101, ^uint64(0))
	require.NoError(t, err)
	require.Zero(t, l.Stats().EntryDiskReads)
}

func TestTailCacheByteBound(t *testing.T) {
	l, _ := openTest(t, Options{TailCacheBytes: 4096})
	data := string(make([]byte, 600))
	var ents []*pb.Entry
	for i := uint64(1); i <= 64; i++ {
		ents = append(ents, entry(i, 1, data))
	}
	require.NoError(t, l.Save(nil, ents))
	st := l.Stats()
	require.LessOrEqual(t, st.TailCacheBytes, int64(4096))
	require.Equal(t, 6, st.TailCacheEntries, "six entries of ~610 bytes fit in 4096")
	got, err := l.Entries(1, 65, ^uint64(0))
	require.NoError(t, err)
	requireEntriesEqual(t, ents, got)
}
