package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/durable"
)

// Backups (`kvd snapshot save` and `restore`, docs/backup.md) read and
// write the items alone, in the form a client sees them: key, flags,
// absolute expiry and value. What is only this cluster's (CAS tokens, which
// are its raft indexes; the member table; meta protocol state such as win
// tokens and stale marks) stays behind: a restore founds a new cluster.

// BackupItem is one item as a backup keeps it.
type BackupItem struct {
	Key   []byte
	Flags uint32
	// ExpiresAt is the absolute expiry in Unix ns; 0: never.
	ExpiresAt int64
	Value     []byte
}

// BackupInfo describes the state a backup reads, before its first item.
type BackupInfo struct {
	// Applied is the raft index the state is as of.
	Applied        uint64
	ClusterVersion uint64
	// Items and Bytes are the store's counters: expired items not yet
	// swept are counted, so they bound what the backup holds.
	Items, Bytes uint64
}

// Backup reads a consistent copy of the whole state: a checkpoint written
// into scratch (which must not exist, on the store's filesystem; removed
// before Backup returns), opened read-only apart from the live store, so a
// long backup holds no lock a snapshot install or a reader waits for, and
// the live store compacts on. It calls start once, then each with every
// item visible at nowNs (Unix ns; expired items and items a delayed
// flush_all hid are left out) in key order. An item and its slices are
// valid only during the call. The copy holds at least everything applied
// before Backup was called. Safe from any goroutine.
func (f *FSM) Backup(scratch string, nowNs int64, start func(BackupInfo) error, each func(*BackupItem) error) (err error) {
	if _, err := f.Checkpoint(scratch); err != nil {
		_ = f.opts.FS.RemoveAll(scratch)
		return fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if rerr := f.opts.FS.RemoveAll(scratch); rerr != nil && err == nil {
			err = fmt.Errorf("backup: remove checkpoint %s: %w", scratch, rerr)
		}
	}()
	db, err := pebble.Open(scratch, &pebble.Options{FS: f.opts.FS, ReadOnly: true,
		Logger: durable.NewPebbleLogger(f.logger.With("component", "pebble", "store", "backup"))})
	if err != nil {
		return fmt.Errorf("backup: open checkpoint: %w", err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("backup: close checkpoint: %w", cerr)
		}
	}()
	var info BackupInfo
	var at, before uint64
	for _, m := range []struct {
		key []byte
		v   *uint64
	}{{metaApplied, &info.Applied}, {metaItems, &info.Items}, {metaBytes, &info.Bytes},
		{metaClusterVersion, &info.ClusterVersion}, {metaFlushAt, &at}, {metaFlushedBefore, &before}} {
		if *m.v, err = getUint64(db, m.key); err != nil {
			return fmt.Errorf("backup: read %q: %w", m.key, err)
		}
	}
	info.ClusterVersion = max(info.ClusterVersion, 1)
	if err := start(info); err != nil {
		return err
	}
	h := horizons{at: int64(at), before: int64(before)}
	iter, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixData}, UpperBound: []byte{prefixData + 1}})
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if cerr := iter.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("backup: %w", cerr)
		}
	}()
	var it command.Item
	var out BackupItem
	for ok := iter.First(); ok; ok = iter.Next() {
		k := iter.Key()
		v, err := iter.ValueAndErr()
		if err != nil {
			return fmt.Errorf("backup: read %q: %w", k[1:], err)
		}
		if err := decodeItem(v, &it); err != nil {
			return fmt.Errorf("backup: %q: %w", k[1:], err)
		}
		if !visible(&it, h, nowNs) {
			continue
		}
		out = BackupItem{Key: k[1:], Flags: it.Flags, ExpiresAt: it.ExpiresAt, Value: it.Value}
		if err := each(&out); err != nil {
			return err
		}
	}
	if err := iter.Error(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// RestoreOptions says what state a restored store is as of.
type RestoreOptions struct {
	// Applied is the raft index the new cluster's log starts after: the
	// store's applied index, and every restored item's CAS token (tokens
	// the new cluster's writes hand out are higher).
	Applied uint64
	// StoredAt is the items' storage time (Unix ns): the backup's, so that
	// a flush_all with a horizon after it hides them, as it would have.
	StoredAt int64
	// FS replaces the filesystem, for tests (default: the OS).
	FS vfs.FS
}

// restoreBatchBytes bounds one batch of a restore.
const restoreBatchBytes = 4 << 20

// Restore builds a state store in dir (which must not exist) holding the
// items next returns until io.EOF, as of opts.Applied, and returns how many
// it wrote. It is what a store that applied everything up to Applied would
// hold, minus what a backup leaves behind (no member table: the new
// cluster's founders are in its cluster.json). A witness's store is one
// with no items. On an error dir may hold a partial store: the caller
// builds it somewhere it removes then.
func Restore(dir string, logger *slog.Logger, opts RestoreOptions, next func() (*BackupItem, error)) (items uint64, err error) {
	if opts.Applied == 0 {
		return 0, errors.New("restore state store: applied index 0")
	}
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	if _, err := fs.Stat(dir); err == nil {
		return 0, fmt.Errorf("restore state store: %s exists", dir)
	}
	if err := durable.MkdirAll(fs, dir); err != nil {
		return 0, fmt.Errorf("restore state store: create %s: %w", dir, err)
	}
	health := newStoreHealth(logger)
	cache := pebble.NewCache(64 << 20)
	defer cache.Unref()
	db, err := pebble.Open(dir, pebbleOptions(cache, Options{FS: fs, MaxOpenFiles: DefaultMaxOpenFiles}, logger, health))
	if err != nil {
		return 0, fmt.Errorf("restore state store: open %s: %w", dir, err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("restore state store: close: %w", cerr)
		}
	}()
	var bytes uint64
	b := db.NewBatch()
	defer func() { _ = b.Close() }()
	var kbuf, enc []byte
	var cas [8]byte
	binary.BigEndian.PutUint64(cas[:], opts.Applied)
	for {
		bi, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		if len(bi.Key) == 0 || len(bi.Key) > command.MaxKeyLen {
			return 0, fmt.Errorf("restore state store: key of %d bytes", len(bi.Key))
		}
		it := command.Item{Flags: bi.Flags, ExpiresAt: bi.ExpiresAt, CAS: opts.Applied, StoredAt: opts.StoredAt, Value: bi.Value}
		enc = encodeItem(enc[:0], &it)
		kbuf = dataKey(kbuf[:0], bi.Key)
		if err := b.Set(kbuf, enc, nil); err != nil {
			return 0, fmt.Errorf("restore state store: write %q: %w", bi.Key, err)
		}
		if it.ExpiresAt != 0 {
			kbuf = expiryKey(kbuf[:0], &it, bi.Key)
			if err := b.Set(kbuf, cas[:], nil); err != nil {
				return 0, fmt.Errorf("restore state store: index %q: %w", bi.Key, err)
			}
		}
		items++
		bytes += uint64(len(bi.Value))
		if b.Len() >= restoreBatchBytes {
			if err := b.Commit(pebble.NoSync); err != nil {
				return 0, fmt.Errorf("restore state store: commit: %w", err)
			}
			_ = b.Close()
			b = db.NewBatch()
		}
	}
	var buf [8]byte
	for _, m := range []struct {
		key []byte
		v   uint64
	}{{metaApplied, opts.Applied}, {metaItems, items}, {metaBytes, bytes}} {
		binary.BigEndian.PutUint64(buf[:], m.v)
		if err := b.Set(m.key, buf[:], nil); err != nil {
			return 0, fmt.Errorf("restore state store: write %q: %w", m.key, err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, fmt.Errorf("restore state store: commit: %w", err)
	}
	// No WAL: what is not flushed is not on disk.
	if err := flush(db, health); err != nil {
		return 0, fmt.Errorf("restore state store: flush: %w", err)
	}
	return items, nil
}
