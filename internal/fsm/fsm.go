// Package fsm owns kvd's state machine: the Pebble store under <data-dir>/state
// that every node builds by applying committed log entries in order.
//
// Apply is a pure function of (state, entry): it reads no clock, no randomness
// and no configuration — time comes from the entry's stamp, CAS tokens are raft
// indexes, and limits travel inside the command. The applied index is written
// in the same batch as the data, so after a crash the state is exactly "all
// entries up to applied", and the raft log replays the rest. The store keeps
// no WAL of its own (pebbleOptions): the raft log is the durable record of
// what was applied, and what the store holds durably is what its flushes
// wrote. Sync reports that index, which the log may be truncated up to and
// no further, and starts the flushes that advance it.
//
// What a command does to an item (set, add, cas, incr, touch, delete...)
// is memcached's semantics, kept apart from the storage in rules.go (and the
// meta commands' mg, ms, md and ma in rules_meta.go): a pure function of the
// old item, the command and its stamp, which Apply feeds from Pebble and
// whose verdict it writes into its batch. How incr reads a stored counter is
// such a rule too (counter.go), fsm's own, not a codec's.
//
// Two in-memory structures keep reads off Pebble, neither a source of truth:
// the item cache (cache.go) holds recently read and written items, and the
// key filter (keyfilter.go) answers "certainly absent" for keys never stored.
//
// Apply is called only from the replica's Ready loop (one goroutine). Get,
// ExpiredBefore and Stats may be called from any goroutine.
package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/durable"
	"github.com/kvd-project/kvd/internal/failpoint"
)

// Entry is one committed log entry handed to Apply.
type Entry struct {
	Index uint64
	Data  []byte
	// Member, when set, is a raft configuration change's effect on the
	// member table (Data is then empty).
	Member *MemberChange
}

// MemberChange adds or removes a member of the replicated member table.
type MemberChange struct {
	ID     uint64
	Remove bool
	// Name and PeerAddr come with an add; a promotion carries none and
	// keeps what the table holds.
	Name, PeerAddr string
	// Witness comes with the add of a witness.
	Witness bool
}

// Options tunes the state store; zero values take the defaults.
type Options struct {
	// CacheBytes is Pebble's block cache size in bytes (default 64 MiB),
	// for blocks alone: the memtables' share is added to it (pebbleOptions).
	CacheBytes int64
	// ItemCacheBytes bounds the item cache in front of Pebble (cache.go);
	// 0 means the default 64 MiB, a negative value turns it off.
	ItemCacheBytes int64
	// FlushAfterBytes and FlushAfterEntries bound what Sync lets the store
	// apply between the flushes it starts, whichever comes first (defaults:
	// flushAfterBytes, and no bound by count); the raft log keeps those
	// entries until then. The node sets the count to --snapshot-count, so
	// that the log is compacted as often as that flag says.
	FlushAfterBytes   int64
	FlushAfterEntries uint64
	// MaxOpenFiles bounds the files the store keeps open (Pebble's file
	// cache); 0 means DefaultMaxOpenFiles. The node sets it from the
	// process's descriptor limit.
	MaxOpenFiles int
	// FS replaces the filesystem, for crash tests (default: the OS).
	FS vfs.FS
	// RetryPause, when set, is called before a flush or compaction creates
	// a file while the store's background work is failing, with the number
	// of failures since the last flush that succeeded; it should sleep a
	// backoff (pacedFS). The node passes one: package fsm keeps no clock.
	// Nil leaves Pebble's retries unpaced.
	RetryPause func(failures uint64)
	// Witness keeps only what a witness needs of the state: the member
	// table, the cluster version and the applied index. Apply passes over
	// every other command, and a snapshot installed is stripped of items
	// (docs/witness.md).
	Witness bool
}

// FSM is the state machine over one Pebble instance.
type FSM struct {
	// dbMu guards db against InstallSnapshot, which closes it and opens the
	// received state in its place. Readers on other goroutines hold it shared
	// while they use db; Apply and Sync need not, because they run on the
	// same goroutine as InstallSnapshot (the replica's Ready loop).
	dbMu   sync.RWMutex
	db     *pebble.DB // nil only after an install failed half-way
	dir    string
	opts   Options
	logger *slog.Logger
	health *storeHealth // Pebble's background work, across snapshot installs

	applied atomic.Uint64
	items   atomic.Int64
	bytes   atomic.Int64
	// flush holds the delayed flush_all horizons (nil: none), published as
	// one: a reader who saw a new last horizon without the passed one it
	// replaced would see what that one hid come back.
	flush atomic.Pointer[horizons]
	// clusterVersion is the replicated cluster version (at least 1): the
	// apply rules of the entries from the one that raised it on.
	clusterVersion atomic.Uint64
	// members caches the member table: read on every cluster view and peer
	// check, written only by membership entries and snapshot installs.
	members atomic.Pointer[memberTable]

	cache *itemCache
	keys  *keyFilter

	// Durability (Sync), owned by the Apply goroutine: the entry bytes
	// applied since the last flush Sync started, that flush while it runs,
	// the index it covers (kept once it is done: entries are counted from
	// it), and the highest index a finished flush made durable.
	unflushed  int64
	flushing   <-chan struct{}
	flushingAt uint64
	durable    atomic.Uint64 // also read by Stats

	// lastPebble is what Stats last read from Pebble (pebbleFigures).
	lastPebble atomic.Pointer[pebbleFigures]
	// storeGen counts the Pebble instances opened (Open, each install),
	// written under dbMu's write lock: Stats tells a reopen by it.
	storeGen uint64

	// scratch buffers reused by Apply (single goroutine).
	kbuf []byte
	// The item cache updates the batch Apply is building will make once it
	// commits; inBatch holds the keys it wrote (whose items only the batch
	// knows), and flushed says an immediate flush_all is in it (the cache
	// then describes nothing in the batch and is cleared at commit).
	cacheWrites []cacheWrite
	inBatch     map[string]struct{}
	flushed     bool
}

// DefaultMaxOpenFiles is Options.MaxOpenFiles when unset: Pebble's own
// default.
const DefaultMaxOpenFiles = 1000

// Open opens (or creates) the state store in dir.
func Open(dir string, logger *slog.Logger, opts Options) (*FSM, error) {
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = 64 << 20
	}
	if opts.MaxOpenFiles <= 0 {
		opts.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if opts.ItemCacheBytes == 0 {
		opts.ItemCacheBytes = 64 << 20
	}
	if opts.FlushAfterBytes <= 0 {
		opts.FlushAfterBytes = flushAfterBytes
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	// A crash in the middle of InstallSnapshot leaves the previous state
	// aside; put back whichever of the two is whole before opening.
	if err := recoverInstall(opts.FS, dir, logger); err != nil {
		return nil, fmt.Errorf("open state store %s: %w", dir, err)
	}
	// Pebble syncs the directory it creates, not its parent: without this a
	// power loss right after the first start could take the whole state
	// directory back while the raft log, compacted behind it, survives.
	if err := durable.MkdirAll(opts.FS, dir); err != nil {
		return nil, fmt.Errorf("open state store %s: create directory: %w", dir, err)
	}
	health := newStoreHealth(logger)
	db, meta, err := openStore(dir, opts, logger, health)
	if err != nil {
		return nil, err
	}
	f := &FSM{db: db, storeGen: 1, dir: dir, opts: opts, logger: logger, health: health,
		cache: newItemCache(max(opts.ItemCacheBytes, 0)), keys: newKeyFilter(logger),
		inBatch: make(map[string]struct{})}
	f.setMeta(meta)
	if err := f.loadMembers(meta.applied); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open state store %s: %w", dir, err)
	}
	f.keys.rebuild(db, int64(meta.items), false)
	return f, nil
}

// Close flushes what was applied and closes the store, so that a clean
// restart has nothing to replay. Should the flush fail, or be skipped
// because the store's flushes are failing (a full disk: see storeHealth),
// the raft log still holds what it would have written (Sync never
// reported it durable), and Close says so in its error.
func (f *FSM) Close() error {
	f.dbMu.Lock()
	defer f.dbMu.Unlock()
	if f.db == nil {
		return nil
	}
	db := f.db
	f.db = nil
	f.keys.stop()
	var errs []error
	if err := flush(db, f.health); err != nil {
		errs = append(errs, fmt.Errorf("flush: %w", err))
	}
	if err := db.Close(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("close state store: %w", errors.Join(errs...))
	}
	return nil
}

// AppliedIndex is the index of the last entry applied (visible to Get).
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// Sync returns the highest applied index the store holds durably: the raft
// log may be truncated up to it and no further. That is what the last
// finished flush that Sync started wrote (or what the store held when it
// opened). Once Options.FlushAfterBytes (or FlushAfterEntries) of entries
// have been applied since the flush before, Sync starts the next one in the
// background and a later call reports it. It never waits for a flush, so
// the caller (the Ready loop) is not held up. It must be called from the
// goroutine that calls Apply.
func (f *FSM) Sync() (uint64, error) {
	if f.flushing != nil {
		select {
		case <-f.flushing:
			f.durable.Store(f.flushingAt)
			f.flushing = nil
		default:
		}
	}
	idx := f.applied.Load()
	byCount := f.opts.FlushAfterEntries > 0 && idx >= f.flushingAt+f.opts.FlushAfterEntries
	if f.flushing == nil && idx > f.flushingAt && (f.unflushed >= f.opts.FlushAfterBytes || byCount) {
		// Everything committed before AsyncFlush is in the memtables it
		// flushes, and Apply stores the applied index after its commit.
		done, err := f.db.AsyncFlush()
		if err != nil {
			return 0, fmt.Errorf("sync state store: flush: %w", err)
		}
		f.flushing, f.flushingAt, f.unflushed = done, idx, 0
	}
	return f.durable.Load(), nil
}

// flushAfterBytes is how many bytes of entries Sync lets the store apply
// between the flushes it starts: three quarters of a memtable, so that
// Sync's flush, not a full memtable, normally starts each one (a flush
// forced at every log compaction, 16 MiB, flushed twice as often, and
// 8 KiB sets ran about 15 % slower than with the WAL). The raft log keeps
// what this leaves unflushed beside what it keeps for followers.
const flushAfterBytes = memTableSize * 3 / 4

// Stats is a point-in-time view for monitoring.
type Stats struct {
	Applied uint64
	// ClusterVersion is the replicated cluster version as of Applied.
	ClusterVersion uint64
	// Durable is the applied index this node's store holds on disk (Sync).
	Durable uint64
	Items   int64
	Bytes   int64
	// DiskBytes is Pebble's on-disk footprint.
	DiskBytes uint64
	// CompactionDebt is Pebble's estimate of bytes its compactions are
	// behind; BlockCacheHits and BlockCacheMisses count block cache lookups.
	CompactionDebt                   uint64
	BlockCacheHits, BlockCacheMisses int64
	// StoreGen numbers the Pebble instance the Pebble figures (the block
	// and file cache counters, which restart at 0 in a new instance) come
	// from: it changes when a snapshot install reopens the store. 0: no
	// store was read (closed, or an install failed).
	StoreGen uint64
	// The item cache: lookups answered from it and not, entries and bytes.
	ItemCacheHits, ItemCacheMisses   uint64
	ItemCacheEntries, ItemCacheBytes int64
	// The key filter: reads it answered absent without Pebble, its memory.
	KeyFilterSkips uint64
	KeyFilterBytes int64
	// Pebble's file cache: the files it holds open (sstables and blob
	// files), its bound (Options.MaxOpenFiles; soft: files in use stay
	// open past it), and its lookups. Misses that keep climbing with
	// OpenFiles at the bound mean reads reopen files.
	OpenFiles, MaxOpenFiles        int64
	FileCacheHits, FileCacheMisses int64
}

// Stats returns counters maintained by apply (identical on every node at the
// same applied index), beside figures of this node's own store: Durable
// (each node flushes on its own schedule), the disk and the caches.
func (f *FSM) Stats() Stats {
	s := Stats{
		Applied:        f.applied.Load(),
		ClusterVersion: f.clusterVersion.Load(),
		Durable:        f.durable.Load(),
		Items:          f.items.Load(),
		Bytes:          f.bytes.Load(),
	}
	s.ItemCacheHits, s.ItemCacheMisses, s.ItemCacheEntries, s.ItemCacheBytes = f.cache.stats()
	s.KeyFilterSkips, s.KeyFilterBytes = f.keys.stats()
	p := f.pebbleFigures()
	s.DiskBytes, s.CompactionDebt = p.DiskBytes, p.CompactionDebt
	s.BlockCacheHits, s.BlockCacheMisses = p.BlockCacheHits, p.BlockCacheMisses
	s.OpenFiles, s.FileCacheHits, s.FileCacheMisses = p.OpenFiles, p.FileCacheHits, p.FileCacheMisses
	s.StoreGen = p.Gen
	s.MaxOpenFiles = int64(f.opts.MaxOpenFiles)
	return s
}

// pebbleFigures are the Stats read from Pebble's own metrics.
type pebbleFigures struct {
	DiskBytes                        uint64
	CompactionDebt                   uint64
	BlockCacheHits, BlockCacheMisses int64
	OpenFiles                        int64
	FileCacheHits, FileCacheMisses   int64
	Gen                              uint64 // FSM.storeGen of the instance read
}

// pebbleFigures reads Pebble's metrics, or, while a snapshot install or
// Close holds the store (its write lock, for as long as the received store
// takes to open), the figures last read: a metrics scrape or a `stats`
// must not wait for an install, and the scrape would time out and lose
// every series.
func (f *FSM) pebbleFigures() pebbleFigures {
	if !f.dbMu.TryRLock() {
		if p := f.lastPebble.Load(); p != nil {
			return *p
		}
		return pebbleFigures{}
	}
	defer f.dbMu.RUnlock()
	if f.db == nil {
		return pebbleFigures{}
	}
	m := f.db.Metrics()
	p := pebbleFigures{
		DiskBytes:        m.DiskSpaceUsage(),
		CompactionDebt:   m.Compact.EstimatedDebt,
		BlockCacheHits:   m.BlockCache.Hits,
		BlockCacheMisses: m.BlockCache.Misses,
		OpenFiles:        m.FileCache.TableCount + m.FileCache.BlobFileCount,
		FileCacheHits:    m.FileCache.Hits,
		FileCacheMisses:  m.FileCache.Misses,
		Gen:              f.storeGen,
	}
	f.lastPebble.Store(&p)
	return p
}

// Get returns the item under key if it is visible at nowNs (Unix ns, the
// reader's clock): not expired and not hidden by a delayed flush_all.
// The item's Value may be shared with the item cache: read it, never
// write to it (its capacity ends with it, so an append copies).
func (f *FSM) Get(key []byte, nowNs int64) (command.Item, bool, error) {
	// The horizon is read before the item: Apply publishes an item's new
	// state (commit, cache) before the horizon that goes with it, so an item
	// read after this load is at least as new as the horizon. Read the other
	// way round, an item a passed horizon hides could be judged by the
	// horizon of a later flush_all that deleted it (0, or one not yet
	// passed) and come back for a moment. It is read under the store's
	// lock: a snapshot install replaces store and horizon together under
	// it, and a horizon read before waiting for an install would judge the
	// installed items by the replaced state's flush_all.
	f.dbMu.RLock()
	defer f.dbMu.RUnlock()
	h := f.horizons()
	if f.db == nil {
		return command.Item{}, false, errNoStore
	}
	enc, ok, seq := f.cache.lookup(key)
	if !ok && !f.keys.mayContain(key) {
		return command.Item{}, false, nil
	}
	if !ok {
		// Declared here: Pebble's Get makes it escape, and a cache hit
		// should not pay for a heap key.
		var kb [1 + command.MaxKeyLen]byte
		v, closer, err := f.db.Get(dataKey(kb[:0], key))
		if errors.Is(err, pebble.ErrNotFound) {
			f.cache.fill(key, absent, seq)
			return command.Item{}, false, nil
		}
		if err != nil {
			return command.Item{}, false, fmt.Errorf("get %q: %w", key, err)
		}
		enc = append([]byte(nil), v...)
		_ = closer.Close()
		f.cache.fill(key, enc, seq)
	}
	// enc is the cache's entry or the copy just cached, and neither is
	// ever written again (store caches a fresh copy), so the value need
	// not be copied once more for every get.
	it, ok, err := viewItem(enc, key)
	if err != nil || !ok || !visible(&it, h, nowNs) {
		return command.Item{}, false, err
	}
	return it, true, nil
}

// readItem decodes an item's stored form, from Pebble's buffer or the item
// cache; an empty enc is a key known absent. Value is a copy: the caller
// may keep it after the buffer is released.
func readItem(enc, key []byte) (command.Item, bool, error) {
	it, ok, err := viewItem(enc, key)
	if ok {
		it.Value = append([]byte(nil), it.Value...)
	}
	return it, ok, err
}

// viewItem is readItem without the copy: Value aliases enc, with its
// capacity cut to its length so that an append cannot write into enc.
func viewItem(enc, key []byte) (command.Item, bool, error) {
	if len(enc) == 0 {
		return command.Item{}, false, nil
	}
	var it command.Item
	if err := decodeItem(enc, &it); err != nil {
		return command.Item{}, false, fmt.Errorf("read %q: %w", key, err)
	}
	it.Value = it.Value[:len(it.Value):len(it.Value)]
	return it, true, nil
}

// horizons reads the published horizons.
func (f *FSM) horizons() horizons {
	if h := f.flush.Load(); h != nil {
		return *h
	}
	return horizons{}
}

// setHorizons publishes h if it differs from what is published.
func (f *FSM) setHorizons(h horizons) {
	if h != f.horizons() {
		f.flush.Store(&h)
	}
}

// ExpiredBefore lists up to limit items whose expiry is at or before nowSec,
// each with the CAS it had when found, for the leader's expiry sweep.
func (f *FSM) ExpiredBefore(nowSec int64, limit int) ([]command.KeyCAS, error) {
	upper := make([]byte, 0, 9)
	upper = append(upper, prefixExpiry)
	upper = binary.BigEndian.AppendUint64(upper, uint64(nowSec)+1)
	f.dbMu.RLock()
	defer f.dbMu.RUnlock()
	if f.db == nil {
		return nil, errNoStore
	}
	iter, err := f.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixExpiry}, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("scan expiry index: %w", err)
	}
	defer iter.Close()
	var out []command.KeyCAS
	for ok := iter.First(); ok && len(out) < limit; ok = iter.Next() {
		k := iter.Key()
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("scan expiry index: %w", err)
		}
		if len(k) < 9 || len(v) != 8 {
			return nil, fmt.Errorf("scan expiry index: malformed entry %q", k)
		}
		out = append(out, command.KeyCAS{Key: append([]byte(nil), k[9:]...), CAS: binary.BigEndian.Uint64(v)})
	}
	if err := iter.Error(); err != nil {
		return nil, fmt.Errorf("scan expiry index: %w", err)
	}
	return out, nil
}

// ClusterVersion is the replicated cluster version as of the applied index
// (at least 1; see command.ClusterVersionMax).
func (f *FSM) ClusterVersion() uint64 { return f.clusterVersion.Load() }

// FlushHorizons are the delayed flush_all horizons as of one apply (Unix
// ns; 0: none): at, from which the last delayed flush_all hides what was
// stored before it, and before, the passed horizon of one that a later one
// replaced, before which everything is hidden for good and waits for the
// leader's crawl (HiddenAfter). Read apart, the two could pair a new
// horizon with the one before the one it replaced.
func (f *FSM) FlushHorizons() (at, before int64) {
	h := f.horizons()
	return h.at, h.before
}

// HiddenAfter reads up to steps items, and values of at most about maxBytes
// (values of a kilobyte and more live in blob files, read whole with their
// item), in key order, strictly after after (nil: from the first), and
// lists those hidden at nowNs, by a delayed
// flush_all whose time has come or by their expiry, each with its CAS. It
// is the leader's crawl for what a delayed flush_all hides: those items are
// in no index, and stay on disk and in curr_items until deleted through the
// log (OpExpire deletes exactly the ones still hidden at its entry's time).
// next is the last key read, nil once the crawl has read the last item.
func (f *FSM) HiddenAfter(after []byte, steps int, maxBytes int64, nowNs int64) (hidden []command.KeyCAS, next []byte, err error) {
	lower := []byte{prefixData}
	if len(after) > 0 {
		lower = append(dataKey(nil, after), 0) // the first key after it
	}
	f.dbMu.RLock()
	defer f.dbMu.RUnlock()
	h := f.horizons() // under the lock and before the data, as in Get
	if f.db == nil {
		return nil, nil, errNoStore
	}
	iter, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: []byte{prefixData + 1}})
	if err != nil {
		return nil, nil, fmt.Errorf("crawl for hidden items: %w", err)
	}
	defer iter.Close()
	var it command.Item
	n, read := 0, int64(0)
	ok := iter.First()
	for ; ok && n < steps && read < maxBytes; ok = iter.Next() {
		n++
		k := iter.Key()
		v, err := iter.ValueAndErr() // Value() hides a failed read as nil
		if err != nil {
			return nil, nil, fmt.Errorf("crawl for hidden items: read key %q: %w", k[1:], err)
		}
		read += int64(len(k) + len(v))
		if err := decodeItem(v, &it); err != nil {
			return nil, nil, fmt.Errorf("crawl for hidden items: key %q: %w", k[1:], err)
		}
		if !visible(&it, h, nowNs) {
			hidden = append(hidden, command.KeyCAS{Key: bytes.Clone(k[1:]), CAS: it.CAS})
		}
		next = append(next[:0], k[1:]...)
	}
	if err := iter.Error(); err != nil {
		return nil, nil, fmt.Errorf("crawl for hidden items: %w", err)
	}
	if !ok {
		next = nil // read to the end
	}
	return hidden, next, nil
}

// Apply applies committed entries in order in one Pebble batch and returns one
// Result per entry. Entries at or below the applied index are skipped (a
// restart replays the log from the last compaction point). An error means the
// store could not be written: the caller must stop the node.
func (f *FSM) Apply(ents []Entry) ([]command.Result, error) {
	results := make([]command.Result, len(ents))
	b := f.db.NewIndexedBatch()
	defer b.Close()
	f.cacheWrites, f.flushed = f.cacheWrites[:0], false
	clear(f.inBatch)
	applied := f.applied.Load()
	st := applyState{items: f.items.Load(), bytes: f.bytes.Load(), flush: f.horizons(), clusterVersion: f.clusterVersion.Load()}
	flushedBefore := st.flush.before
	var c command.Command
	for i, e := range ents {
		if e.Index <= applied {
			continue
		}
		if e.Index != applied+1 {
			return nil, fmt.Errorf("apply: entry %d does not follow applied index %d", e.Index, applied)
		}
		applied = e.Index
		f.unflushed += int64(len(e.Data))
		if e.Member != nil {
			st.membersChanged = true
			if err := f.applyMemberChange(b, e.Member, st.clusterVersion); err != nil {
				return nil, fmt.Errorf("apply member change at %d: %w", e.Index, err)
			}
			continue
		}
		if len(e.Data) == 0 {
			continue
		}
		if err := command.Decode(e.Data, &c); err != nil {
			if errors.Is(err, command.ErrUnsupported) {
				// The nodes that know it apply it: skipping it here would
				// leave this node's items silently different from theirs.
				// Nothing of this batch is committed, so a kvd that knows
				// the entry applies it from here on restart.
				return nil, fmt.Errorf("apply entry %d: %w; run a kvd release that knows it on this node", e.Index, err)
			}
			// Corrupt alike on every node: log and skip, never stop the cluster.
			f.logger.Error("skipping undecodable entry", "index", e.Index, "err", err)
			// Addressed to its proposer when the header names one, which
			// then learns now that nothing was done, not at its timeout.
			results[i] = command.Result{ReqID: c.ReqID, Status: command.StatusInvalid}
			continue
		}
		if f.opts.Witness && !witnessApplies(c.Op) {
			results[i] = command.Result{ReqID: c.ReqID}
			continue
		}
		r, err := f.applyOne(b, &st, &c, e.Index)
		if err != nil {
			return nil, fmt.Errorf("apply entry %d (%s): %w", e.Index, command.Describe(&c), err)
		}
		r.ReqID = c.ReqID
		results[i] = r
	}
	if applied == f.applied.Load() {
		return results, nil
	}
	var buf [8]byte
	for _, m := range []struct {
		key []byte
		v   uint64
	}{{metaApplied, applied}, {metaItems, uint64(st.items)}, {metaBytes, uint64(st.bytes)}, {metaFlushAt, uint64(st.flush.at)}} {
		binary.BigEndian.PutUint64(buf[:], m.v)
		if err := b.Set(m.key, buf[:], nil); err != nil {
			return nil, fmt.Errorf("apply: write %q: %w", m.key, err)
		}
	}
	if st.flush.before != flushedBefore {
		// Absent at 0, never written as 0: each node batches the same
		// entries its own way, and a horizon set and reset within one
		// batch on one node, across two on another, must leave the same
		// bytes (the digest compares them).
		var err error
		if st.flush.before == 0 {
			err = b.Delete(metaFlushedBefore, nil)
		} else {
			binary.BigEndian.PutUint64(buf[:], uint64(st.flush.before))
			err = b.Set(metaFlushedBefore, buf[:], nil)
		}
		if err != nil {
			return nil, fmt.Errorf("apply: write %q: %w", metaFlushedBefore, err)
		}
	}
	if st.clusterVersion != f.clusterVersion.Load() {
		binary.BigEndian.PutUint64(buf[:], st.clusterVersion)
		if err := b.Set(metaClusterVersion, buf[:], nil); err != nil {
			return nil, fmt.Errorf("apply: write %q: %w", metaClusterVersion, err)
		}
	}
	failpoint.Hit(failpoint.FSMBeforeApply)
	if err := b.Commit(pebble.NoSync); err != nil {
		return nil, fmt.Errorf("apply: commit batch: %w", err)
	}
	failpoint.Hit(failpoint.FSMAfterApply)
	if f.flushed {
		f.cache.clear()
	}
	if f.flushed || f.keys.full() {
		// Between batches: the scan sees this commit and apply adds what follows.
		f.keys.rebuild(f.db, st.items, true)
	}
	f.cache.putAll(f.cacheWrites)
	clear(f.cacheWrites) // the cache owns the slices now
	// The member table is state like the items: published before the
	// applied index, so that a reader who sees the index sees the table.
	if st.membersChanged {
		if err := f.loadMembers(applied); err != nil {
			return nil, fmt.Errorf("apply: %w", err)
		}
	}
	f.items.Store(st.items)
	f.bytes.Store(st.bytes)
	f.setHorizons(st.flush)
	f.clusterVersion.Store(st.clusterVersion)
	f.applied.Store(applied)
	return results, nil
}

// applyState carries the counters through one batch.
type applyState struct {
	items, bytes int64
	flush        horizons
	// clusterVersion is the cluster version at the entry being applied.
	clusterVersion uint64
	// membersChanged: the member table must be reloaded after the commit.
	membersChanged bool
}

func (f *FSM) applyOne(b *pebble.Batch, st *applyState, c *command.Command, index uint64) (command.Result, error) {
	if c.Op == command.OpFlush {
		return f.applyFlush(b, st, c)
	}
	if c.Op == command.OpExpire {
		return f.applyExpire(b, st, c)
	}
	if c.Op == command.OpAccess {
		return f.applyAccess(b, st, c)
	}
	if c.Op == command.OpMember {
		st.membersChanged = true
		return f.applyMemberAttrs(b, &c.Member)
	}
	if c.Op == command.OpClusterVersion {
		// Proposed only once every member applies it; a member that does
		// not (one downgraded since) must stop rather than apply what
		// follows by older rules than its peers.
		if c.ClusterVersion > command.ClusterVersionMax {
			return command.Result{}, tooNew(c.ClusterVersion)
		}
		// The leader asked the members of the table it fingerprinted. A
		// member added, replaced or re-addressed by an entry before this
		// one was never asked: refused here, alike on every node (the
		// table is replicated state, read through the batch), and the
		// leader asks again.
		if c.MemberTable != 0 {
			ms, err := readMembers(b)
			if err != nil {
				return command.Result{}, err
			}
			if MemberTableSum(ms) != c.MemberTable {
				return command.Result{Status: command.StatusNotStored}, nil
			}
		}
		st.clusterVersion = max(st.clusterVersion, c.ClusterVersion)
		return command.Result{Status: command.StatusOK}, nil
	}
	// An item's command: read the item, ask its rule, write the verdict.
	old, exists, err := f.load(b, c.Key)
	if err != nil {
		return command.Result{}, err
	}
	next, v, res := itemRule(c, &old, exists, st.flush, index)
	switch v {
	case put:
		err = f.store(b, st, c.Key, &old, exists, &next)
	case drop:
		err = f.remove(b, st, c.Key, &old)
	}
	if err != nil {
		return command.Result{}, err
	}
	return res, nil
}

func (f *FSM) applyFlush(b *pebble.Batch, st *applyState, c *command.Command) (command.Result, error) {
	at := c.Stamp
	if c.Delay > 0 {
		at = command.ExpiryOf(c.Delay, c.Stamp)
	}
	// A delay is a horizon: what was stored before it goes once it comes.
	// One given as an absolute time already past (over 30 days, like an
	// exptime) is a horizon that has come, not a flush of everything:
	// memcached 1.6.18 flushes nothing for a time before it started (the
	// 1970 of "flush_all 2592001", the 2001 of "flush_all 1000000000"),
	// and such a horizon hides nothing here either. (For a past time after
	// its start memcached flushes everything; here only what was stored
	// before that time goes.) From cluster version 2 on: before it, such a
	// flush_all flushed everything, and every member must apply it alike.
	if c.Delay > 0 && (at > c.Stamp || st.clusterVersion >= 2) {
		// A later flush_all replaces a pending one, as in memcached. One
		// whose horizon has passed is no longer pending: what it hid goes
		// for good, or the new horizon would bring it back. From cluster
		// version 3 on, its horizon is kept (horizons.before), which hides
		// those items until the leader's crawl deletes them through the
		// log; before it, they were deleted here, reading every item in
		// one apply (1.1 s of a stalled log for 500,000 items of 512 B,
		// each time a delayed flush_all followed another).
		if st.flush.at != 0 && st.flush.at <= c.Stamp {
			if st.clusterVersion >= 3 {
				st.flush.before = max(st.flush.before, st.flush.at)
			} else if err := f.dropStoredBefore(b, st, st.flush.at); err != nil {
				return command.Result{}, err
			}
		}
		st.flush.at = at
		return command.Result{Status: command.StatusOK}, nil
	}
	// Immediate: everything stored before this entry goes, exactly at this
	// point of the log; anything after it is visible, even in the same second.
	for _, p := range []byte{prefixData, prefixExpiry} {
		if err := b.DeleteRange([]byte{p}, []byte{p + 1}, nil); err != nil {
			return command.Result{}, fmt.Errorf("flush_all: %w", err)
		}
	}
	st.items, st.bytes, st.flush = 0, 0, horizons{}
	// Dropped, not just cut off: Apply clears only what is left in the
	// slice, and the values of the writes before the flush would stay
	// reachable from its reused array.
	clear(f.cacheWrites)
	f.flushed, f.cacheWrites = true, f.cacheWrites[:0]
	return command.Result{Status: command.StatusOK}, nil
}

// dropStoredBefore deletes every item stored before horizon, the passed
// horizon of a delayed flush_all. It reads every item, which is why a
// delayed flush only hides items (visible) and this runs only when a later
// flush_all replaces a horizon that has passed, below cluster version 3.
func (f *FSM) dropStoredBefore(b *pebble.Batch, st *applyState, horizon int64) (err error) {
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixData}, UpperBound: []byte{prefixData + 1}})
	if err != nil {
		return fmt.Errorf("flush_all: scan items: %w", err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("flush_all: scan items: %w", cerr)
		}
	}()
	var old command.Item
	for ok := it.First(); ok; ok = it.Next() {
		key := it.Key()[1:]
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("flush_all: read %q: %w", key, err)
		}
		if err := decodeItem(v, &old); err != nil {
			return fmt.Errorf("flush_all: read %q: %w", key, err)
		}
		if old.StoredAt < horizon {
			if err := f.remove(b, st, append([]byte(nil), key...), &old); err != nil {
				return fmt.Errorf("flush_all: %w", err)
			}
		}
	}
	return nil
}

func (f *FSM) applyExpire(b *pebble.Batch, st *applyState, c *command.Command) (command.Result, error) {
	for _, kc := range c.Expired {
		old, exists, err := f.load(b, kc.Key)
		if err != nil {
			return command.Result{}, err
		}
		if !expireRule(&old, exists, kc.CAS, st.flush, c.Stamp) {
			continue
		}
		if err := f.remove(b, st, kc.Key, &old); err != nil {
			return command.Result{}, err
		}
	}
	return command.Result{Status: command.StatusOK}, nil
}

// applyAccess marks read each listed item still at the CAS its reader saw
// (accessRule), in one batch like OpExpire's.
func (f *FSM) applyAccess(b *pebble.Batch, st *applyState, c *command.Command) (command.Result, error) {
	for _, kc := range c.Accessed {
		old, exists, err := f.load(b, kc.Key)
		if err != nil {
			return command.Result{}, err
		}
		next, ok := accessRule(&old, exists, kc, st.flush, c.Stamp)
		if !ok {
			continue
		}
		if err := f.store(b, st, kc.Key, &old, exists, &next); err != nil {
			return command.Result{}, err
		}
	}
	return command.Result{Status: command.StatusOK}, nil
}

// load reads the item under key as the batch being applied sees it: from the
// item cache, unless the batch itself changed the key (or flushed all).
func (f *FSM) load(b *pebble.Batch, key []byte) (command.Item, bool, error) {
	if _, changed := f.inBatch[string(key)]; !changed && !f.flushed {
		if enc, ok, _ := f.cache.lookup(key); ok {
			return readItem(enc, key)
		}
	}
	if !f.keys.mayContain(key) {
		return command.Item{}, false, nil
	}
	f.kbuf = dataKey(f.kbuf[:0], key)
	v, closer, err := b.Get(f.kbuf)
	if errors.Is(err, pebble.ErrNotFound) {
		return command.Item{}, false, nil
	}
	if err != nil {
		return command.Item{}, false, fmt.Errorf("read %q: %w", key, err)
	}
	defer closer.Close()
	return readItem(v, key)
}

// store writes next under key in place of old (when exists), with its
// expiry index entry and the counters.
func (f *FSM) store(b *pebble.Batch, st *applyState, key []byte, old *command.Item, exists bool, next *command.Item) error {
	if exists {
		st.bytes -= int64(len(old.Value))
		if old.ExpiresAt != 0 {
			f.kbuf = expiryKey(f.kbuf[:0], old, key)
			if err := b.Delete(f.kbuf, nil); err != nil {
				return fmt.Errorf("unindex %q: %w", key, err)
			}
		}
	} else {
		st.items++
		f.keys.add(key)
	}
	st.bytes += int64(len(next.Value))
	// The item cache keeps the encoding the batch copies in. Appending the
	// value to a header that fills its array makes append allocate, and
	// append copies the value in without zeroing the space first.
	var enc []byte
	if hasMeta(next) {
		var hdr [itemMetaHeaderLen]byte
		enc = encodeItem(hdr[:0], next)
	} else {
		var hdr [itemHeaderLen]byte
		enc = encodeItem(hdr[:0], next)
	}
	f.kbuf = dataKey(f.kbuf[:0], key)
	if err := b.Set(f.kbuf, enc, nil); err != nil {
		return fmt.Errorf("write %q: %w", key, err)
	}
	f.cached(key, enc)
	if next.ExpiresAt != 0 {
		var cas [8]byte
		binary.BigEndian.PutUint64(cas[:], next.CAS)
		f.kbuf = expiryKey(f.kbuf[:0], next, key)
		if err := b.Set(f.kbuf, cas[:], nil); err != nil {
			return fmt.Errorf("index %q: %w", key, err)
		}
	}
	return nil
}

func (f *FSM) remove(b *pebble.Batch, st *applyState, key []byte, old *command.Item) error {
	st.items--
	st.bytes -= int64(len(old.Value))
	f.kbuf = dataKey(f.kbuf[:0], key)
	if err := b.Delete(f.kbuf, nil); err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	f.cached(key, absent)
	if old.ExpiresAt != 0 {
		f.kbuf = expiryKey(f.kbuf[:0], old, key)
		if err := b.Delete(f.kbuf, nil); err != nil {
			return fmt.Errorf("unindex %q: %w", key, err)
		}
	}
	return nil
}

// cached notes what the batch wrote under key, for the item cache at commit.
func (f *FSM) cached(key, enc []byte) {
	k := append([]byte(nil), key...)
	f.inBatch[string(k)] = struct{}{}
	f.cacheWrites = append(f.cacheWrites, cacheWrite{key: k, enc: enc})
}

func getUint64(db *pebble.DB, key []byte) (uint64, error) {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("want 8 bytes, have %d", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
