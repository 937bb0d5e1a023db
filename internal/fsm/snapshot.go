package fsm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/durable"
	"github.com/kvd-project/kvd/internal/failpoint"
)

// A snapshot of the state store is a Pebble checkpoint: Checkpoint writes one
// on the leader (hard links, so it costs little disk and no copy of the data)
// and the transport streams its files to a follower, which hands the
// received directory to InstallSnapshot. The applied index travels inside
// the checkpoint, in the same keys Apply maintains, so the installed state
// says by itself which log entries it already contains.

// replacedSuffix names the previous state directory while InstallSnapshot
// swaps a received one in. Its presence at Open means a crash interrupted
// the swap (see recoverInstall).
const replacedSuffix = ".replaced"

// errNoStore is what readers get after an install failed half-way; the
// replica stops the node on that failure, so they see it only briefly.
var errNoStore = errors.New("state store unavailable: a snapshot install failed")

// storeMeta is the apply bookkeeping kept beside the data.
type storeMeta struct {
	applied, items, bytes, flushAt uint64
	flushedBefore                  uint64
	clusterVersion                 uint64 // at least 1
}

// openStore opens the Pebble instance in dir and reads its bookkeeping.
func openStore(dir string, opts Options, logger *slog.Logger, health *storeHealth) (*pebble.DB, storeMeta, error) {
	if err := upgradeV1Store(dir, opts.FS, logger); err != nil {
		return nil, storeMeta{}, fmt.Errorf("open state store %s: %w", dir, err)
	}
	cache := pebble.NewCache(opts.CacheBytes + memTableReserve)
	defer cache.Unref()
	db, err := pebble.Open(dir, pebbleOptions(cache, opts, logger, health))
	if err != nil {
		return nil, storeMeta{}, fmt.Errorf("open state store %s: %w", dir, err)
	}
	// A store written by a kvd that kept a WAL (or a checkpoint such a kvd
	// sent) has what Pebble replayed from that WAL in a memtable now, and
	// the raft log may have been truncated past it: write it out before
	// anything relies on it.
	if err := flush(db, health); err != nil {
		_ = db.Close()
		return nil, storeMeta{}, fmt.Errorf("open state store %s: flush: %w", dir, err)
	}
	var m storeMeta
	for _, f := range []struct {
		key []byte
		v   *uint64
	}{{metaApplied, &m.applied}, {metaItems, &m.items}, {metaBytes, &m.bytes}, {metaFlushAt, &m.flushAt}, {metaFlushedBefore, &m.flushedBefore}, {metaClusterVersion, &m.clusterVersion}} {
		v, err := getUint64(db, f.key)
		if err != nil {
			_ = db.Close()
			return nil, storeMeta{}, fmt.Errorf("open state store %s: read %q: %w", dir, f.key, err)
		}
		*f.v = v
	}
	m.clusterVersion = max(m.clusterVersion, 1)
	if m.clusterVersion > command.ClusterVersionMax {
		_ = db.Close()
		return nil, storeMeta{}, fmt.Errorf("open state store %s: %w", dir, tooNew(m.clusterVersion))
	}
	return db, m, nil
}

// tooNew is the error of a state at cluster version v, past what this
// binary applies: a cluster cannot be downgraded below its version.
func tooNew(v uint64) error {
	return fmt.Errorf("%w: the cluster is at version %d and this kvd applies versions up to %d; run a kvd release that applies it",
		command.ErrUnsupported, v, command.ClusterVersionMax)
}

// pebbleOptions tunes the store for what kvd asks of it: point reads of
// whole keys (every get, and every write, which reads the item it
// replaces), most of them for keys that exist in at most one level.
//   - A bloom filter on every level lets a read skip the sstables that do
//     not hold its key without touching their index blocks: misses and
//     writes of new keys cost a hash, not a seek per level.
//   - A 32 MiB memtable (Pebble's default is 4 MiB) flushes eight times
//     less often, so a write load makes fewer, larger L0 files and
//     compacts less. Memtables start at 256 KiB and double up to it, so a
//     store that takes few writes never holds one that large.
//     Pebble charges memtables to the block cache: each one reserves its
//     size there while it lives, and one is kept for reuse after its flush.
//     So the cache is made memTableReserve larger than CacheBytes, which
//     then is what blocks get. Sized at CacheBytes alone, the default
//     64 MiB went entirely to the mutable memtable and the flushed one, and
//     not one block stayed cached: every read that missed the item cache,
//     including the read a write makes of the item it replaces, went to
//     the files (bench/RESULTS-core.md).
//   - No block compression. Memcache clients compress large values
//     themselves (and flag them so), and the rest are mostly small: Snappy
//     costs CPU on every flush and compaction for little or nothing (a
//     profile of 8 KiB sets spent 5 % of kvd's CPU in it). memcached keeps
//     values as they came too.
//   - Values of blobMinSize bytes or more are kept in blob files, out of
//     the sstables (Pebble's value separation): a flush writes them once
//     and compactions then move only keys and references. With 8 KiB
//     values, compactions had taken over half of kvd's CPU; separated,
//     8 KiB sets run about 40 % faster on the same box
//     (bench/RESULTS-core.md).
//     Smaller values stay inline, where a get reads them with their key.
//   - sstables of targetFileSize at every level. Pebble sizes a table by
//     the bytes of the values it refers to in blob files as well as its
//     own, so at its default targets (2 MiB in L0, doubling per level) a
//     table of 8 KiB values held about 250 keys in a few kilobytes: 10 s
//     of 8 KiB sets left some 700 files in the store, and creating,
//     opening and deleting them took a large share of the compactions'
//     CPU. At 64 MiB (RocksDB's default, the same at every level, so no
//     level makes gigabyte tables of inline values) the same load left
//     about 60 files, and kvd spent 10-20 % less CPU per 8 KiB set
//     (bench/RESULTS-core.md).
//   - No WAL. The raft log already holds every entry durably before it is
//     applied, and replays what the store lost; a WAL wrote each value a
//     third time (after the raft log and before the flush), a third of
//     kvd's disk writes, beside the raft log's fsync. Without it, 8 KiB
//     sets ran 5-9 % faster in alternating runs (bench/RESULTS-core.md).
//     What the store holds durably is then what its flushes wrote:
//     FSM.Sync reports that and starts flushes, and Close and Checkpoint
//     flush first.
//   - 64 KiB blocks in L0, where flushes write their blob files (Pebble
//     sizes a blob file's blocks by its output level). With the default
//     4 KiB every 8 KiB value became a block of its own and cost two
//     write syscalls; a profile of 8 KiB sets spent 27 % of kvd's CPU
//     there, and 7 % with 64 KiB blocks (bench/RESULTS-core.md). Deeper
//     levels, where reads find most keys, keep small blocks.
func pebbleOptions(cache *pebble.Cache, opts Options, logger *slog.Logger, health *storeHealth) *pebble.Options {
	po := &pebble.Options{
		Cache:         cache,
		FS:            opts.FS,
		Logger:        durable.NewPebbleLogger(logger.With("component", "pebble")),
		EventListener: &pebble.EventListener{},
		MemTableSize:  memTableSize,
		MaxOpenFiles:  opts.MaxOpenFiles,
		DisableWAL:    true,
		// Pinned, so that a Pebble upgrade never ratchets the on-disk
		// format by surprise; value separation needs this version.
		FormatMajorVersion: pebble.FormatValueSeparation,
	}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].FilterType = pebble.TableFilter
	}
	po.Levels[0].BlockSize = 64 << 10
	for i := range po.TargetFileSizes {
		po.TargetFileSizes[i] = targetFileSize
	}
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	po.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:     true,
			MinimumSize: blobMinSize,
			// A compaction that would make one sstable refer to more than
			// maxBlobDepth overlapping blob files rewrites the values
			// instead. Every flush writes blob files across the key space
			// of its writes, so a deep sstable gains about one per flush,
			// and under a steady write load the depth is reached every
			// maxBlobDepth flushes: each time, a compaction copies the
			// values it covers again. At 10 the compactions below L0
			// copied values over and over (in 30 s of 8 KiB sets Pebble's
			// write amplification into L5 and L6 was about 200 at 10, 2
			// at 64) and the sets ran 15-20 % slower than at 64; at 64
			// that copying still began about 15 s into such a load (a
			// flush every 0.2 s) and took 8 KiB sets over 30 s from
			// 17.6-18.5k/s at 256 down to 14.4-16.4k/s. A get reads one
			// blob file whatever the depth (bench/RESULTS-core.md).
			// A blob file is rewritten once a fifth of what it holds is
			// garbage (overwritten or deleted values), but not before it is
			// five minutes old, so churn is not copied over and over.
			MaxBlobReferenceDepth: maxBlobDepth,
			TargetGarbageRatio:    0.2,
			// Five minutes, in nanoseconds: fsm does not import package
			// time (internal/testing/lint keeps apply free of clocks).
			RewriteMinimumAge: 5 * 60 * 1e9,
		}
	}
	health.listen(po.EventListener)
	if opts.RetryPause != nil {
		po.FS = pacedFS{FS: opts.FS, health: health, pause: opts.RetryPause}
	}
	po.EnsureDefaults()
	return po
}

// memTableSize is the state store's memtable size, and memTableReserve
// what its memtables reserve of the block cache in steady state: the
// mutable one, and the one being flushed or kept for reuse.
const (
	memTableSize    = 32 << 20
	memTableReserve = 2 * memTableSize
)

// blobMinSize is the smallest value kept in a blob file, targetFileSize
// the size of the sstables compactions write, and maxBlobDepth how many
// overlapping blob files an sstable may refer to (see pebbleOptions).
const (
	blobMinSize    = 1024
	targetFileSize = 64 << 20
	maxBlobDepth   = 256
)

// setMeta takes the bookkeeping of a store just opened, all of it on disk.
func (f *FSM) setMeta(m storeMeta) {
	f.items.Store(int64(m.items))
	f.bytes.Store(int64(m.bytes))
	f.setHorizons(horizons{at: int64(m.flushAt), before: int64(m.flushedBefore)})
	f.clusterVersion.Store(m.clusterVersion)
	f.applied.Store(m.applied)
	f.durable.Store(m.applied)
	f.flushing, f.flushingAt, f.unflushed = nil, m.applied, 0
}

// Checkpoint writes a consistent copy of the store into dir, which must not
// exist (its parent is created if needed), and returns an applied index the
// copy covers at least: the copy may include entries applied concurrently,
// never fewer. The memtables are flushed first: the store has no WAL, and a
// checkpoint holds only files, so the copy then holds everything applied so
// far. Sstables are hard-linked:
// the caller must remove dir when done with it, or the links keep files the
// store has compacted away alive on disk. Safe from any goroutine.
func (f *FSM) Checkpoint(dir string) (uint64, error) {
	f.dbMu.RLock()
	defer f.dbMu.RUnlock()
	if f.db == nil {
		return 0, errNoStore
	}
	applied := f.applied.Load()
	if err := flush(f.db, f.health); err != nil {
		return 0, fmt.Errorf("checkpoint state store: flush: %w", err)
	}
	if err := f.db.Checkpoint(dir); err != nil {
		return 0, fmt.Errorf("checkpoint state store into %s: %w", dir, err)
	}
	return applied, nil
}

// InstallSnapshot replaces the whole state with the checkpoint in src (a
// directory on the same filesystem as the store, written and fsynced by the
// caller), which it consumes: on success src no longer exists. minApplied is
// the raft index of the snapshot: the received state must cover it. It must
// be called from the goroutine that calls Apply; concurrent readers wait for
// the swap and then see the new state.
//
// The received state is opened and checked once before the current store is
// touched, so a checkpoint that does not open, or that is behind the
// snapshot (an empty directory opens as an empty store), costs nothing. The swap itself is two
// renames, each made durable before the next step:
//
//	state → state.replaced, then src → state, then remove state.replaced
//
// A crash between the renames leaves no state but a state.replaced, which
// Open renames back (the raft log has not taken the snapshot yet: the
// replica installs the state before the log, so the old state still matches
// the log). A crash after the second rename leaves both, and Open removes the
// replaced one.
//
// An error after the current store was closed leaves the FSM without a store
// (readers get errors): the caller must stop the node.
func (f *FSM) InstallSnapshot(src string, minApplied uint64) error {
	fs := f.opts.FS
	probe, got, err := openStore(src, f.opts, f.logger, newStoreHealth(f.logger))
	if err != nil {
		return fmt.Errorf("install snapshot: received state does not open: %w", err)
	}
	if f.opts.Witness {
		if err := stripItems(probe); err != nil {
			_ = probe.Close()
			return fmt.Errorf("install snapshot: strip the items a witness does not keep: %w", err)
		}
	} else if copied, err := isWitnessCopy(probe); err != nil || copied {
		_ = probe.Close()
		if err == nil {
			err = errors.New("it was made for a witness and holds no items (does the leader take this member for a witness?)")
		}
		return fmt.Errorf("install snapshot: refused: %w", err)
	}
	if err := probe.Close(); err != nil {
		return fmt.Errorf("install snapshot: close received state: %w", err)
	}
	if got.applied < minApplied {
		return fmt.Errorf("install snapshot: received state is applied to %d, behind the snapshot index %d", got.applied, minApplied)
	}
	f.dbMu.Lock()
	defer f.dbMu.Unlock()
	// Whatever happens below, the cached items describe the old state; the
	// readers that could fill it again wait on dbMu.
	f.cache.clear()
	// The filter describes the old state; the new one gets its own scan.
	f.keys.stop()
	f.keys.cur.Store(nil)
	prev := f.applied.Load()
	if f.db != nil {
		db := f.db
		f.db = nil
		if err := db.Close(); err != nil {
			return fmt.Errorf("install snapshot: close current state: %w", err)
		}
	}
	replaced := f.dir + replacedSuffix
	if err := fs.RemoveAll(replaced); err != nil {
		return fmt.Errorf("install snapshot: remove leftover %s: %w", replaced, err)
	}
	if err := fs.Rename(f.dir, replaced); err != nil {
		return fmt.Errorf("install snapshot: move current state aside: %w", err)
	}
	if err := syncDir(fs, filepath.Dir(f.dir)); err != nil {
		return fmt.Errorf("install snapshot: %w", err)
	}
	failpoint.Hit(failpoint.SnapshotInstall)
	if err := fs.Rename(src, f.dir); err != nil {
		return fmt.Errorf("install snapshot: move received state in place: %w", err)
	}
	if err := syncDir(fs, filepath.Dir(f.dir)); err != nil {
		return fmt.Errorf("install snapshot: %w", err)
	}
	if err := syncDir(fs, filepath.Dir(src)); err != nil {
		return fmt.Errorf("install snapshot: %w", err)
	}
	db, meta, err := openStore(f.dir, f.opts, f.logger, f.health)
	if err != nil {
		return fmt.Errorf("install snapshot: %w", err)
	}
	f.db = db
	f.storeGen++
	f.setMeta(meta)
	f.keys.rebuild(db, int64(meta.items), false)
	if err := f.loadMembers(meta.applied); err != nil {
		return fmt.Errorf("install snapshot: %w", err)
	}
	if err := fs.RemoveAll(replaced); err != nil {
		// The new state is in place; the old copy only wastes disk until the
		// next Open removes it.
		f.logger.Warn("could not remove the replaced state store", "dir", replaced, "err", err)
	}
	failpoint.Hit(failpoint.SnapshotInstalled)
	f.logger.Info("installed state store snapshot", "applied", meta.applied, "previous_applied", prev, "items", meta.items)
	return nil
}

// recoverInstall finishes or undoes an InstallSnapshot a crash interrupted.
func recoverInstall(fs vfs.FS, dir string, logger *slog.Logger) error {
	replaced := dir + replacedSuffix
	if _, err := fs.Stat(replaced); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("check for an interrupted snapshot install: %w", err)
	}
	_, err := fs.Stat(dir)
	switch {
	case err == nil:
		logger.Warn("removing the state store a snapshot install replaced before a crash", "dir", replaced)
		if err := fs.RemoveAll(replaced); err != nil {
			return fmt.Errorf("remove replaced state %s: %w", replaced, err)
		}
		return nil
	case errors.Is(err, os.ErrNotExist):
		logger.Warn("restoring the state store a crash left aside during a snapshot install", "dir", replaced)
		if err := fs.Rename(replaced, dir); err != nil {
			return fmt.Errorf("restore state from %s: %w", replaced, err)
		}
		return syncDir(fs, filepath.Dir(dir))
	default:
		return fmt.Errorf("check state dir: %w", err)
	}
}

// syncDir makes renames and creations in dir durable.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open dir %s for fsync: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("close dir %s: %w", dir, err)
	}
	return nil
}
