package raftlog

import pb "go.etcd.io/raft/v3/raftpb"

// tailCache holds the most recent entries of the log, contiguous and ending
// at the log's last index, bounded by entry count and encoded bytes. Entries
// are shared, never mutated (raft.Storage's contract for entries).
type tailCache struct {
	maxEntries int
	maxBytes   int64

	ents  []cachedEntry // ents[i] has index first+i
	first uint64
	bytes int64
}

type cachedEntry struct {
	e    *pb.Entry
	size int // proto-encoded size, as raft counts it against maxSize
}

func newTailCache(maxEntries int, maxBytes int64) *tailCache {
	return &tailCache{maxEntries: maxEntries, maxBytes: maxBytes}
}

// get returns the cached entry at index i.
func (c *tailCache) get(i uint64) (cachedEntry, bool) {
	if len(c.ents) == 0 || i < c.first || i-c.first >= uint64(len(c.ents)) {
		return cachedEntry{}, false
	}
	return c.ents[i-c.first], true
}

// firstIndex returns the index of the oldest cached entry, or 0 when empty.
func (c *tailCache) firstIndex() uint64 {
	if len(c.ents) == 0 {
		return 0
	}
	return c.first
}

func (c *tailCache) len() int { return len(c.ents) }

// append adds entries that directly follow the log's previous last index.
// Cached entries at or beyond the first new index are dropped first; if the
// new entries do not connect to the cached ones the cache restarts with them.
func (c *tailCache) append(ents []cachedEntry) {
	if len(ents) == 0 {
		return
	}
	start := ents[0].e.GetIndex()
	c.truncateFrom(start)
	if len(c.ents) > 0 && c.first+uint64(len(c.ents)) != start {
		c.reset()
	}
	if len(c.ents) == 0 {
		c.first = start
	}
	for _, ce := range ents {
		c.ents = append(c.ents, ce)
		c.bytes += int64(ce.size)
	}
	c.evict()
}

// truncateFrom drops cached entries with index >= i.
func (c *tailCache) truncateFrom(i uint64) {
	if len(c.ents) == 0 || i >= c.first+uint64(len(c.ents)) {
		return
	}
	if i <= c.first {
		c.reset()
		return
	}
	keep := int(i - c.first)
	for j := keep; j < len(c.ents); j++ {
		c.bytes -= int64(c.ents[j].size)
		c.ents[j] = cachedEntry{}
	}
	c.ents = c.ents[:keep]
}

// dropThrough drops cached entries with index <= i (log compaction).
func (c *tailCache) dropThrough(i uint64) {
	if len(c.ents) == 0 || i < c.first {
		return
	}
	n := i - c.first + 1
	if n >= uint64(len(c.ents)) {
		c.reset()
		return
	}
	c.dropFront(int(n))
}

func (c *tailCache) dropFront(n int) {
	for j := range n {
		c.bytes -= int64(c.ents[j].size)
		c.ents[j] = cachedEntry{} // let the GC have the entry before the array is reallocated
	}
	c.ents = c.ents[n:]
	c.first += uint64(n)
}

// evict drops the oldest entries until both bounds hold.
func (c *tailCache) evict() {
	n := 0
	bytes := c.bytes
	for n < len(c.ents) && (len(c.ents)-n > c.maxEntries || bytes > c.maxBytes) {
		bytes -= int64(c.ents[n].size)
		n++
	}
	if n == len(c.ents) {
		c.reset()
		return
	}
	if n > 0 {
		c.dropFront(n)
	}
}

func (c *tailCache) reset() {
	c.ents = nil
	c.first = 0
	c.bytes = 0
}
