package raftlog

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/durable"
)

// Until format version 2 the log was kept in a Pebble instance of its own
// in the same directory (keys.go has its layout). Open converts such a log
// into segment files once: it reads it whole and checks it as that version
// did, writes one segment under a temporary name, fsyncs it, renames it into
// place and only then removes Pebble's files. A crash before the rename
// leaves the Pebble log, converted again on the next Open; a crash after it
// leaves the segment, and Open removes what remains of Pebble's files.

// isPebbleFile reports whether name is one of the files a Pebble instance
// keeps in its directory, or a segment being written by a conversion.
func isPebbleFile(name string) bool {
	for _, p := range []string{"MANIFEST-", "OPTIONS-", "CURRENT", "LOCK", "marker.", "temporary."} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	for _, s := range []string{".sst", ".log", ".blob", convertSuffix} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

const convertSuffix = ".converting"

// pebbleLog is what a Pebble-kept log holds.
type pebbleLog struct {
	hs         *pb.HardState
	compaction *pb.SnapshotMetadata
	ents       []*pb.Entry
	empty      bool
}

// convertPebble writes the Pebble-kept log in l.dir as segment 1.
func (l *Log) convertPebble() error {
	old, err := readPebbleLog(l.fs, l.dir, l.logger)
	if err != nil {
		return fmt.Errorf("convert the Pebble log: %w", err)
	}
	tmp := l.fs.PathJoin(l.dir, segmentName(1)+convertSuffix)
	f, err := l.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("convert the Pebble log: %w", err)
	}
	var buf []byte
	crc := segmentSeed(1)
	buf, crc = appendRecord(buf, crc, recHeader, headerPayload(1))
	if !old.empty {
		recs := []proto.Message{old.compaction, old.hs}
		types := []byte{recCompaction, recHardState}
		for _, e := range old.ents {
			recs = append(recs, e)
			types = append(types, recEntry)
		}
		for i, m := range recs {
			v, err := proto.Marshal(m)
			if err != nil {
				return errors.Join(fmt.Errorf("convert the Pebble log: %w", err), f.Close())
			}
			buf, crc = appendRecord(buf, crc, types[i], v)
		}
	}
	if _, err := f.Write(buf); err != nil {
		return errors.Join(fmt.Errorf("convert the Pebble log: %w", err), f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("convert the Pebble log: %w", err), f.Close())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("convert the Pebble log: %w", err)
	}
	if err := l.fs.Rename(tmp, l.fs.PathJoin(l.dir, segmentName(1))); err != nil {
		return fmt.Errorf("convert the Pebble log: %w", err)
	}
	if err := l.syncDir(); err != nil {
		return fmt.Errorf("convert the Pebble log: %w", err)
	}
	l.logger.Info("raft log converted from Pebble to segment files",
		"entries", len(old.ents), "compaction_index", old.compaction.GetIndex())
	return nil
}

// removeOthers removes every file in l.dir but segments, spares and the lock.
func (l *Log) removeOthers() error {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	for _, name := range names {
		if _, ok := parseFileName(name, segmentPrefix); ok {
			continue
		}
		if _, ok := parseFileName(name, sparePrefix); ok || name == lockName {
			continue
		}
		if err := l.fs.RemoveAll(l.fs.PathJoin(l.dir, name)); err != nil {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	return l.syncDir()
}

// readPebbleLog reads and checks a Pebble-kept log.
func readPebbleLog(fs vfs.FS, dir string, logger *slog.Logger) (*pebbleLog, error) {
	po := &pebble.Options{
		FS:                 fs,
		Logger:             durable.NewPebbleLogger(logger.With("component", "raftlog/pebble")),
		FormatMajorVersion: pebble.FormatVirtualSSTables,
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, err
	}
	old, err := loadPebble(db)
	return old, errors.Join(err, db.Close())
}

func loadPebble(db *pebble.DB) (*pebbleLog, error) {
	get := func(key []byte) ([]byte, error) {
		v, closer, err := db.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", key, err)
		}
		defer closer.Close()
		return append([]byte(nil), v...), nil
	}
	version, err := get(keyFormat)
	if err != nil {
		return nil, err
	}
	switch {
	case version == nil:
		// Checked below, once we know whether the log holds anything.
	case len(version) != 1:
		return nil, fmt.Errorf("%w: format version %x", ErrCorrupt, version)
	case version[0] != pebbleFormatVersion:
		return nil, fmt.Errorf("unsupported format version %d in Pebble (this binary converts %d)", version[0], pebbleFormatVersion)
	}
	old := &pebbleLog{hs: new(pb.HardState)}
	v, err := get(keyHardState)
	if err != nil {
		return nil, err
	}
	hasHardState := v != nil
	if hasHardState {
		if err := proto.Unmarshal(v, old.hs); err != nil {
			return nil, fmt.Errorf("%w: hard state: %v", ErrCorrupt, err)
		}
	}
	old.compaction = &pb.SnapshotMetadata{Index: new(uint64(0)), Term: new(uint64(0)), ConfState: new(pb.ConfState)}
	v, err = get(keyCompaction)
	if err != nil {
		return nil, err
	}
	hasCompaction := v != nil
	if hasCompaction {
		if old.compaction, err = decodeMeta(v); err != nil {
			return nil, err
		}
	}
	if err := old.scan(db); err != nil {
		return nil, err
	}
	last := old.compaction.GetIndex() + uint64(len(old.ents))
	if c := old.hs.GetCommit(); c > last {
		return nil, fmt.Errorf("%w: hard state commit %d beyond last index %d", ErrCorrupt, c, last)
	}
	old.empty = !hasHardState && !hasCompaction && len(old.ents) == 0
	if version == nil && !old.empty {
		return nil, fmt.Errorf("%w: format version missing from a non-empty log", ErrCorrupt)
	}
	return old, nil
}

// scan reads every entry, checking that they run contiguously from the
// compaction index + 1 with non-decreasing terms.
func (old *pebbleLog) scan(db *pebble.DB) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: entryKeysStart, UpperBound: entryKeysEnd})
	if err != nil {
		return fmt.Errorf("scan entries: %w", err)
	}
	defer it.Close()
	next := old.compaction.GetIndex() + 1
	prevTerm := old.compaction.GetTerm()
	for ok := it.First(); ok; ok = it.Next() {
		idx, err := parseEntryKey(it.Key())
		if err != nil {
			return err
		}
		switch {
		case idx < next: // keys are sorted and unique: only the first entry can be here
			return fmt.Errorf("%w: entry %d at or below the compaction index %d", ErrCorrupt, idx, old.compaction.GetIndex())
		case idx != next:
			return fmt.Errorf("%w: entry %d missing (next present: %d)", ErrCorrupt, next, idx)
		}
		e, err := decodeEntry(idx, it.Value())
		if err != nil {
			return err
		}
		if e.GetTerm() < prevTerm {
			return fmt.Errorf("%w: entry %d has term %d, below the previous term %d", ErrCorrupt, idx, e.GetTerm(), prevTerm)
		}
		prevTerm = e.GetTerm()
		old.ents = append(old.ents, e)
		next++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan entries: %w", err)
	}
	return nil
}
