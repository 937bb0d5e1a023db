package fsm

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// itemCache keeps the stored form of recently read and written items in
// memory, so that a get of a hot key, and the read every write makes of the
// item it replaces, cost a map lookup instead of a Pebble search through
// memtables and levels (a quarter of a node's CPU under a get-heavy load).
// It also remembers keys found absent, which is what writes of new keys and
// gets of missing keys look up.
//
// It is a cache of Pebble, never a second source of truth:
//   - apply updates it only after its batch has committed, with what the
//     batch wrote (putAll), and clears it for a flush_all or a snapshot;
//   - a reader fills it from Pebble only if no write touched the key's shard
//     between its lookup and its fill (the shard's sequence number), so a
//     value read before a concurrent apply can never overwrite that apply's.
//
// Visibility (expiry, delayed flush_all) is decided after the lookup, from
// the cached bytes, exactly as for bytes read from Pebble.
type itemCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
	// limit is the byte budget of one shard; 0 disables the cache.
	limit int

	hits, misses atomic.Uint64
}

const cacheShards = 64

// entryOverhead approximates what an entry costs beyond its key and value:
// the map slot, the string and slice headers, allocator rounding.
const entryOverhead = 64

// maxEntryShare: an entry larger than 1/maxEntryShare of its shard is not
// cached (128 KiB with the default 64 MiB cache). The cache is for the many
// small hot items memcached clients keep; a multi-get of large values
// streams them from Pebble instead of churning the cache and the heap.
const maxEntryShare = 8

type cacheShard struct {
	mu    sync.Mutex
	seq   uint64 // bumped by every write to the shard
	m     map[string][]byte
	bytes int
}

// absent marks a key known not to exist (distinct from a nil lookup miss).
var absent = []byte{}

func newItemCache(bytes int64) *itemCache {
	c := &itemCache{seed: maphash.MakeSeed(), limit: int(bytes / cacheShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]byte)
	}
	return c
}

func (c *itemCache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)%cacheShards]
}

// lookup returns the cached stored form of key (absent if the key is known
// not to exist) and ok; on a miss, the shard's sequence number for fill.
func (c *itemCache) lookup(key []byte) (enc []byte, ok bool, seq uint64) {
	if c.limit == 0 {
		return nil, false, 0
	}
	s := c.shard(key)
	s.mu.Lock()
	enc, ok = s.m[string(key)]
	seq = s.seq
	s.mu.Unlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return enc, ok, seq
}

// fill caches what a reader found in Pebble (enc, or absent) unless a write
// reached the shard since the reader's lookup returned seq. enc is kept, not
// copied: the caller hands over a slice nobody will modify.
func (c *itemCache) fill(key, enc []byte, seq uint64) {
	if c.limit == 0 {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	if s.seq == seq {
		s.set(key, enc, c.limit)
	}
	s.mu.Unlock()
}

// cacheWrite is one key a committed apply batch wrote: its new stored form,
// or absent for a delete.
type cacheWrite struct {
	key, enc []byte
}

// putAll records what a committed batch wrote. The slices are taken over.
func (c *itemCache) putAll(ws []cacheWrite) {
	if c.limit == 0 {
		return
	}
	for _, w := range ws {
		s := c.shard(w.key)
		s.mu.Lock()
		s.seq++
		s.set(w.key, w.enc, c.limit)
		s.mu.Unlock()
	}
}

// clear forgets everything, and makes fills begun before it fail.
func (c *itemCache) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.seq++
		clear(s.m)
		s.bytes = 0
		s.mu.Unlock()
	}
}

// stats returns hits, misses, entries and bytes.
func (c *itemCache) stats() (hits, misses uint64, entries, bytes int64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		entries += int64(len(s.m))
		bytes += int64(s.bytes)
		s.mu.Unlock()
	}
	return c.hits.Load(), c.misses.Load(), entries, bytes
}

// set stores enc under key, evicting entries until the shard fits its
// limit. Eviction takes whatever map iteration yields first, which Go
// randomises: random replacement, which for a cache in front of a store
// this fast is within a few percent of LRU and costs no bookkeeping on hits.
// s.mu held.
func (s *cacheShard) set(key, enc []byte, limit int) {
	size := len(key) + len(enc) + entryOverhead
	if old, ok := s.m[string(key)]; ok {
		s.bytes -= len(key) + len(old) + entryOverhead
		delete(s.m, string(key))
	}
	if size > limit/maxEntryShare {
		return // a large value would evict many hot small ones for one read
	}
	for s.bytes+size > limit {
		for k, v := range s.m {
			s.bytes -= len(k) + len(v) + entryOverhead
			delete(s.m, k)
			break
		}
	}
	s.m[string(key)] = enc
	s.bytes += size
}
