package fsm

import (
	"hash/maphash"
	"log/slog"
	"math/bits"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// keyFilter says, without touching Pebble, that a key is certainly not in
// the store: a bloom filter over every data key. Apply reads the item each
// write replaces, and for a new key that read is a Pebble search through the
// memtables and one filter block per level that finds nothing: a fifth of a
// node's CPU under a load of new keys. Gets of missing keys pay the same.
//
// It never calls absent a key that Pebble holds:
//   - apply adds a key before the batch that writes it commits, so a reader
//     that could see the key in Pebble also sees its bits;
//   - a filter is built by scanning the store from an iterator opened on
//     the apply goroutine between two batches, and apply adds every key it
//     writes from then on to the filter being built too, so the scanned keys
//     and the added ones cover the store at any later point;
//   - until the first build completes (after Open or a snapshot install)
//     there is no filter and every key may be present.
//
// Keys are never removed: a deleted key stays a false positive, costing the
// Pebble read the filter exists to save, until the next build. A build is
// started when the filter holds more keys than it was sized for (twice the
// items the store held when it was built), and after a flush_all. A scan
// reads the whole store (Pebble v1 cannot iterate keys without values), so
// its cost is spread thin: one build per doubling of the keys written since
// the last, which is about one item read for every new key written.
type keyFilter struct {
	logger *slog.Logger
	cur    atomic.Pointer[blockedBloom] // nil: no filter yet, every key may exist
	skips  atomic.Uint64                // reads it answered absent

	// build is the scan in progress or last finished; apply goroutine only.
	build *filterBuild
}

type filterBuild struct {
	b    *blockedBloom
	stop chan struct{} // closed to cancel the scan
	done chan struct{}
}

// minFilterKeys is the smallest capacity a filter is built with (24 KiB).
const minFilterKeys = 1 << 14

func newKeyFilter(logger *slog.Logger) *keyFilter {
	return &keyFilter{logger: logger}
}

// mayContain reports whether key may be in the store; false is certain.
// Safe from any goroutine.
func (f *keyFilter) mayContain(key []byte) bool {
	b := f.cur.Load()
	if b == nil || b.has(key) {
		return true
	}
	f.skips.Add(1)
	return false
}

// stats returns the reads answered absent and the current filter's memory.
func (f *keyFilter) stats() (skips uint64, bytes int64) {
	if b := f.cur.Load(); b != nil {
		bytes = int64(len(b.words)) * 8
	}
	return f.skips.Load(), bytes
}

// add records a key apply is about to write, before its batch commits.
// Apply goroutine only.
func (f *keyFilter) add(key []byte) {
	cur := f.cur.Load()
	if cur != nil {
		cur.add(key)
	}
	if bl := f.build; bl != nil && bl.b != cur {
		bl.b.add(key)
	}
}

// rebuild starts a scan of db into a new filter sized for items keys, in the
// background, cancelling any scan in progress. The current filter stays in
// use until the new one is complete if keep is set (it is still a superset
// of the store); otherwise there is none meanwhile. Apply goroutine only,
// between batches.
func (f *keyFilter) rebuild(db *pebble.DB, items int64, keep bool) {
	f.stop()
	if !keep {
		f.cur.Store(nil)
	}
	iter, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixData}, UpperBound: []byte{prefixData + 1}})
	if err != nil {
		// Whatever filter there is stays valid; missing keys cost a Pebble read.
		f.logger.Warn("key filter: cannot scan the state store", "err", err)
		return
	}
	bl := &filterBuild{b: newBloom(2 * items), stop: make(chan struct{}), done: make(chan struct{})}
	f.build = bl
	go f.scan(iter, bl)
}

func (f *keyFilter) scan(iter *pebble.Iterator, bl *filterBuild) {
	defer close(bl.done)
	n := 0
	for ok := iter.First(); ok; ok = iter.Next() {
		bl.b.add(iter.Key()[1:])
		if n++; n%4096 == 0 {
			select {
			case <-bl.stop:
				_ = iter.Close()
				return
			default:
			}
		}
	}
	if err := iter.Close(); err != nil {
		// Without a complete scan the filter could call a stored key absent;
		// keep the previous one (or none) and let the next trigger retry.
		f.logger.Warn("key filter: scan of the state store failed; the previous filter (or none) stays until the next build", "err", err)
		return
	}
	// A complete scan is published even if stop came after its last key: it
	// is a valid filter of the store it read, and the callers of stop that
	// replace that store reset cur themselves once stop returns.
	f.cur.Store(bl.b)
	f.logger.Info("key filter built", "scanned_keys", n, "capacity", bl.b.capacity, "bytes", len(bl.b.words)*8)
}

// stop cancels the scan in progress, if any, and waits for it: the store
// it reads may be closed once stop returns. Apply goroutine only.
func (f *keyFilter) stop() {
	bl := f.build
	if bl == nil {
		return
	}
	close(bl.stop) // once: stop forgets the build below
	<-bl.done
	f.build = nil
}

// full reports whether the filter holds more keys than it was sized for
// and no build is running: time to build a larger one. Apply goroutine only.
func (f *keyFilter) full() bool {
	if bl := f.build; bl != nil {
		select {
		case <-bl.done:
			f.build = nil
		default:
			return false
		}
	}
	cur := f.cur.Load()
	return cur != nil && cur.count.Load() > cur.capacity
}

// blockedBloom is a bloom filter: every key's bits fall in one 64-byte
// block, so a lookup touches one cache line. Bits are set and read
// atomically: apply and a background scan add while readers test.
type blockedBloom struct {
	seed     maphash.Seed
	words    []atomic.Uint64 // blocks × 8
	blocks   uint64
	capacity int64
	count    atomic.Int64
}

const (
	bloomBitsPerKey = 12
	bloomProbes     = 7 // 9 bits each from one 64-bit hash
)

func newBloom(capacity int64) *blockedBloom {
	capacity = max(capacity, minFilterKeys)
	blocks := (capacity*bloomBitsPerKey + 511) / 512
	return &blockedBloom{seed: maphash.MakeSeed(), words: make([]atomic.Uint64, blocks*8),
		blocks: uint64(blocks), capacity: capacity}
}

// locate returns key's block and the hash whose 9-bit groups pick its bits.
func (b *blockedBloom) locate(key []byte) ([]atomic.Uint64, uint64) {
	h := maphash.Bytes(b.seed, key)
	blk, _ := bits.Mul64(h, b.blocks) // the high bits of h choose the block
	// The bits within the block come from a remix, so they do not repeat
	// the ones that chose the block.
	return b.words[blk*8 : blk*8+8], bits.RotateLeft64(h, 31) * 0x9e3779b97f4a7c15
}

func (b *blockedBloom) add(key []byte) {
	w, h := b.locate(key)
	for i := range bloomProbes {
		bit := (h >> (9 * i)) & 511
		w[bit>>6].Or(1 << (bit & 63))
	}
	b.count.Add(1)
}

func (b *blockedBloom) has(key []byte) bool {
	w, h := b.locate(key)
	for i := range bloomProbes {
		bit := (h >> (9 * i)) & 511
		if w[bit>>6].Load()&(1<<(bit&63)) == 0 {
			return false
		}
	}
	return true
}
