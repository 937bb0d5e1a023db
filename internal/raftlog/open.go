package raftlog

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/durable"
)

// Open opens the log in dir (<data-dir>/raft), creating the directory and an
// empty log if needed, loads the hard state, compaction point and the
// recent entries into memory, and checks that the entries are contiguous
// from FirstIndex to LastIndex. A log that fails the check is not opened: the
// error wraps ErrCorrupt. A nil logger discards log output.
func Open(dir string, logger *slog.Logger, opts Options) (*Log, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("raftlog: open %s: invalid options: %w", dir, err)
	}
	opts = opts.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "raftlog")

	if err := durable.MkdirAll(opts.FS, dir); err != nil {
		return nil, fmt.Errorf("raftlog: open %s: create directory: %w", dir, err)
	}
	cache := pebble.NewCache(opts.BlockCacheBytes)
	defer cache.Unref() // Pebble holds its own reference while open
	po := &pebble.Options{
		FS:           opts.FS,
		Cache:        cache,
		MemTableSize: opts.MemTableBytes,
		Logger:       pebbleLogger{logger.With("component", "raftlog/pebble")},
		// Pinned, so that a Pebble upgrade never ratchets the on-disk format
		// by surprise. Durability settings (WAL on, fsync on Sync commits)
		// are Pebble's defaults and are left alone.
		FormatMajorVersion: pebble.FormatVirtualSSTables,
	}
	// Entries that outlive a memtable live in sstables only until the next
	// log compaction deletes them: compressing them is CPU spent on data
	// about to go. (Separating large values into blob files, as the state
	// store does, was measured here too: 8 KiB sets ran no faster.)
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", dir, err)
	}
	l := &Log{
		db:          db,
		logger:      logger,
		cache:       newTailCache(opts.TailCacheEntries, opts.TailCacheBytes),
		observeSync: opts.ObserveSync,
	}
	if err := l.load(); err != nil {
		return nil, errors.Join(fmt.Errorf("raftlog: open %s: %w", dir, err), db.Close())
	}
	logger.Info("raft log opened", "dir", dir,
		"first_index", l.firstIndex(), "last_index", l.lastIndex,
		"term", l.hardState.GetTerm(), "commit", l.hardState.GetCommit(),
		"cached_entries", l.cache.len(), "empty", l.empty)
	return l, nil
}

// load reads the on-disk state into l and checks it.
func (l *Log) load() error {
	version, err := l.get(keyFormat)
	if err != nil {
		return err
	}
	switch {
	case version == nil:
		// Checked below, once we know whether the log holds anything.
	case len(version) != 1:
		return fmt.Errorf("%w: format version %x", ErrCorrupt, version)
	case version[0] != formatVersion:
		return fmt.Errorf("unsupported format version %d (this binary reads %d)", version[0], formatVersion)
	}

	l.hardState = new(pb.HardState)
	v, err := l.get(keyHardState)
	if err != nil {
		return err
	}
	hasHardState := v != nil
	if hasHardState {
		if err := proto.Unmarshal(v, l.hardState); err != nil {
			return fmt.Errorf("%w: hard state: %v", ErrCorrupt, err)
		}
	}

	l.compaction = &pb.SnapshotMetadata{Index: new(uint64(0)), Term: new(uint64(0)), ConfState: new(pb.ConfState)}
	v, err = l.get(keyCompaction)
	if err != nil {
		return err
	}
	hasCompaction := v != nil
	if hasCompaction {
		m := new(pb.SnapshotMetadata)
		if err := proto.Unmarshal(v, m); err != nil {
			return fmt.Errorf("%w: compaction point: %v", ErrCorrupt, err)
		}
		if m.Index == nil || m.Term == nil || m.ConfState == nil {
			return fmt.Errorf("%w: compaction point lacks index, term or conf state", ErrCorrupt)
		}
		l.compaction = m
	}

	if err := l.scanEntries(); err != nil {
		return err
	}
	if c := l.hardState.GetCommit(); c > l.lastIndex {
		return fmt.Errorf("%w: hard state commit %d beyond last index %d", ErrCorrupt, c, l.lastIndex)
	}

	hasEntries := l.lastIndex > l.compaction.GetIndex()
	l.empty = !hasHardState && !hasCompaction && !hasEntries
	if version == nil {
		if !l.empty {
			return fmt.Errorf("%w: format version missing from a non-empty log", ErrCorrupt)
		}
		b := l.db.NewBatch()
		defer b.Close()
		if err := b.Set(keyFormat, []byte{formatVersion}, nil); err != nil {
			return fmt.Errorf("write format version: %w", err)
		}
		if err := l.commit(b); err != nil {
			return fmt.Errorf("write format version: %w", err)
		}
	}
	return nil
}

// scanEntries reads every entry, checking that they run contiguously from
// the compaction index + 1 with non-decreasing terms, sets l.lastIndex and
// fills the tail cache.
func (l *Log) scanEntries() error {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: entryKeysStart, UpperBound: entryKeysEnd})
	if err != nil {
		return fmt.Errorf("scan entries: %w", err)
	}
	defer it.Close()
	next := l.compaction.GetIndex() + 1
	prevTerm := l.compaction.GetTerm()
	for ok := it.First(); ok; ok = it.Next() {
		idx, err := parseEntryKey(it.Key())
		if err != nil {
			return err
		}
		switch {
		case idx < next: // keys are sorted and unique: only the first entry can be here
			return fmt.Errorf("%w: entry %d at or below the compaction index %d", ErrCorrupt, idx, l.compaction.GetIndex())
		case idx != next:
			return fmt.Errorf("%w: entry %d missing (next present: %d)", ErrCorrupt, next, idx)
		}
		v := it.Value()
		e, err := decodeEntry(idx, v)
		if err != nil {
			return err
		}
		if e.GetTerm() < prevTerm {
			return fmt.Errorf("%w: entry %d has term %d, below the previous term %d", ErrCorrupt, idx, e.GetTerm(), prevTerm)
		}
		prevTerm = e.GetTerm()
		l.cache.append([]cachedEntry{{e: e, size: len(v)}})
		next++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan entries: %w", err)
	}
	l.lastIndex = next - 1
	return nil
}

// get returns a copy of the value of key, nil if absent.
func (l *Log) get(key []byte) ([]byte, error) {
	v, closer, err := l.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// pebbleLogger routes Pebble's log output to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

// Fatalf is called by Pebble on an internal invariant violation, after
// which it must not continue: like Pebble's default logger we stop, with a
// panic rather than os.Exit so that the stack is printed.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble fatal error", "msg", msg)
	panic("raftlog: pebble: " + msg)
}
