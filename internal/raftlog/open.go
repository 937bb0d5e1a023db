package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/durable"
)

// Open opens the log in dir (<data-dir>/raft), creating the directory and an
// empty log if needed, converting a log an earlier version kept in Pebble,
// replaying the segments into memory and checking that the entries are
// contiguous from FirstIndex to LastIndex. A log that fails the check is not
// opened: the error wraps ErrCorrupt. Writing then starts in a new segment,
// after sealing the last one where its last whole record ends: whatever a
// crash left half-written there is never read again. A last segment that
// holds no entry or snapshot is instead replaced by a new file under its
// number (replaceLast), so that restarts which write nothing do not add a
// segment each. A nil logger discards log output.
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
	lock, err := opts.FS.Lock(opts.FS.PathJoin(dir, lockName))
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("raftlog: open %s: another kvd is running on this data dir (its lock is held): %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: lock: %w", dir, err)
	}
	l := &Log{
		fs:           opts.FS,
		dir:          dir,
		lock:         lock,
		logger:       logger,
		segmentBytes: opts.SegmentBytes,
		maxSpares:    opts.SpareSegments,
		// Only on a real disk: in memory there are no blocks to allocate.
		prefillSpares: opts.FS == vfs.Default,
		cache:         newTailCache(opts.TailCacheEntries, opts.TailCacheBytes),
		observeSync:   opts.ObserveSync,
	}
	// Held because open may start prefilling a spare, which takes it.
	l.mu.Lock()
	err = l.open()
	if err != nil {
		l.closed = true
	}
	l.unlock()
	if err != nil {
		l.prepWG.Wait()
		for _, s := range l.segs {
			err = errors.Join(err, s.f.Close())
		}
		return nil, errors.Join(fmt.Errorf("raftlog: open %s: %w", dir, err), lock.Close())
	}
	logger.Info("raft log opened", "dir", dir,
		"first_index", l.firstIndex(), "last_index", l.lastIndex,
		"term", l.hardState.GetTerm(), "commit", l.hardState.GetCommit(),
		"segments", len(l.segs), "cached_entries", l.cache.len(), "empty", l.empty)
	return l, nil
}

// open lists the directory, converts or cleans up what an earlier version
// or an interrupted conversion left, replays the segments and starts the
// segment to write. l.mu held.
func (l *Log) open() error {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	var seqs []uint64
	pebbleFiles := false
	for _, name := range names {
		if seq, ok := parseFileName(name, segmentPrefix); ok {
			seqs = append(seqs, seq)
		} else if seq, ok := parseFileName(name, sparePrefix); ok {
			l.spares = append(l.spares, seq)
		} else if isPebbleFile(name) {
			pebbleFiles = true
		} else if name == prepTempName || name == replaceTempName {
			if err := l.fs.Remove(l.fs.PathJoin(l.dir, name)); err != nil {
				return fmt.Errorf("remove %s: %w", name, err)
			}
		}
	}
	if pebbleFiles {
		if len(seqs) == 0 {
			if err := l.convertPebble(); err != nil {
				return err
			}
			seqs = []uint64{1}
		}
		// The segments are the log; what Pebble left is not.
		if err := l.removeOthers(); err != nil {
			return err
		}
	}
	slices.Sort(seqs)
	slices.Sort(l.spares)
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			return fmt.Errorf("%w: segment %d missing (segments %d and %d present)", ErrCorrupt, seqs[i-1]+1, seqs[i-1], seqs[i])
		}
	}
	for _, seq := range seqs {
		f, err := l.fs.OpenReadWrite(l.fs.PathJoin(l.dir, segmentName(seq)), vfs.WriteCategoryUnspecified)
		if err != nil {
			return fmt.Errorf("open segment %d: %w", seq, err)
		}
		l.segs = append(l.segs, &segment{seq: seq, f: f})
	}
	rp := replay{
		hs:   new(pb.HardState),
		comp: &pb.SnapshotMetadata{Index: new(uint64(0)), Term: new(uint64(0)), ConfState: new(pb.ConfState)},
	}
	var tail segmentEnd
	for i, s := range l.segs {
		last := i == len(l.segs)-1
		end, err := rp.segment(l, s, last)
		if err != nil {
			return fmt.Errorf("segment %d: %w", s.seq, err)
		}
		if last {
			tail = end
			l.off, l.crc = end.off, end.crc
		}
	}
	if err := rp.finish(); err != nil {
		return err
	}
	l.hardState, l.compaction, l.pos, l.lastIndex, l.empty = rp.hs, rp.comp, rp.pos, rp.last, rp.empty()
	if err := l.fillCache(); err != nil {
		return err
	}

	switch {
	case len(l.segs) == 0:
		return l.startSegment(1)
	case tail.stateOnly:
		// Either its header never reached the disk (a crash in rotate:
		// segment() checked that nothing valid follows it), or it holds
		// nothing that a new header does not repeat. Rotating would leave
		// it behind, one more file at every restart.
		return l.replaceLast()
	default:
		return l.rotate()
	}
}

// fillCache reads the most recent entries into the tail cache: only those
// it keeps, as many of the newest as fit both of its bounds (pos has their
// sizes). Reading TailCacheEntries entries and letting the byte bound evict
// most of them would hold them all in memory at once: gigabytes, at the
// start of a node whose log holds large values.
func (l *Log) fillCache() error {
	lo := l.lastIndex + 1
	var bytes int64
	for k := len(l.pos) - 1; k >= 0 && l.lastIndex+1-lo < uint64(l.cache.maxEntries); k-- {
		size := int64(l.pos[k].n - recordHeaderLen)
		if bytes+size > l.cache.maxBytes {
			break
		}
		bytes += size
		lo--
	}
	var ents []cachedEntry
	_, _, err := l.readEntries(lo, l.lastIndex+1, func(e *pb.Entry, n int) bool {
		ents = append(ents, cachedEntry{e: e, size: n})
		return true
	})
	if err != nil {
		return err
	}
	l.entryDiskReads.Store(0)
	l.cache.append(ents)
	return nil
}

// replay rebuilds the log's state from its records, in the order written.
type replay struct {
	hs   *pb.HardState
	comp *pb.SnapshotMetadata
	pos  []entryPos // entries comp.Index+1 .. last
	last uint64
	// gapEnd is the highest index missing below an entry (the segments that
	// held it were recycled): the compaction point must cover it.
	gapEnd                          uint64
	sawHS, sawComp, sawEntry, sawSn bool
}

func (r *replay) empty() bool { return !r.sawHS && !r.sawComp && !r.sawEntry && !r.sawSn }

// segmentEnd is what replaying one segment found.
type segmentEnd struct {
	off int64  // where its records end, before its seal if it has one
	crc uint32 // the CRC a record written at off is chained from
	// stateOnly is set when it holds no entry and no snapshot: everything
	// it adds to the log is a compaction point and a HardState, which the
	// header records of a segment started after it repeat.
	stateOnly bool
}

// segment replays the records of s. Every segment but the last must end
// with a seal; the last may end anywhere (a crash), even before its header,
// but not before a header that only damage can have spoiled
// (checkHeaderlessTail).
func (r *replay) segment(l *Log, s *segment, last bool) (segmentEnd, error) {
	st, err := s.f.Stat()
	if err != nil {
		return segmentEnd{}, fmt.Errorf("stat: %w", err)
	}
	sr := newSegmentReader(s.f, s.seq, st.Size())
	end := segmentEnd{stateOnly: true}
	var prevTyp byte
	for n := 0; ; n++ {
		rec, err := sr.next()
		if errors.Is(err, errEndOfRecords) {
			if !last {
				return segmentEnd{}, fmt.Errorf("%w: no valid record at offset %d, and the segment is not the last", ErrCorrupt, sr.off)
			}
			if n == 0 {
				if err := checkHeaderlessTail(s.f, s.seq, st.Size()); err != nil {
					return segmentEnd{}, err
				}
			} else if n == 1 || (n == 2 && prevTyp == recCompaction) {
				if err := checkHeaderRecordsTail(s.f, s.seq, sr.off, n, st.Size()); err != nil {
					return segmentEnd{}, err
				}
			} else if err := checkTornTail(s.f, s.seq, sr.off, sr.crc, r.hs, r.comp.GetIndex(), st.Size()); err != nil {
				return segmentEnd{}, err
			}
			end.off, end.crc = sr.off, sr.crc
			return end, nil
		}
		if err != nil {
			return segmentEnd{}, err
		}
		prevTyp = rec.typ
		if (n == 0) != (rec.typ == recHeader) {
			return segmentEnd{}, fmt.Errorf("%w: record of type %d at offset %d", ErrCorrupt, rec.typ, rec.off)
		}
		if err := r.record(s, rec); err != nil {
			return segmentEnd{}, fmt.Errorf("record at offset %d: %w", rec.off, err)
		}
		switch rec.typ {
		case recEntry, recSnapshot:
			end.stateOnly = false
		case recSeal:
			end.off, end.crc = rec.off, rec.prev
			return end, nil
		}
	}
}

// checkHeaderlessTail tells a last segment whose header fails its checksum
// from what a crash in rotate leaves (a new file, or a spare renamed, whose
// header write never reached the disk). startSegment fsyncs the header
// records before anything else is written into the segment, so a record
// that checks out after the header is one a crash cannot explain: the
// header was damaged after it was written, and the records after it may
// hold acknowledged entries and HardStates. The error then wraps
// ErrCorrupt; nil means nothing valid follows and the segment may be
// replaced. (The compaction point and HardState that follow the header are
// in the same write, but start in the header's sector, which a crash
// persists whole or not at all.)
//
// The header's bytes are not trusted: it can only be the header of this
// format for this number, so its CRC is computed, not read. Chaining from
// the CRC stored in the file instead would accept what a recycled spare
// still holds (records chained from its old header, under its old number),
// and a zeroed or prefilled remainder never has a valid record type.
func checkHeaderlessTail(f vfs.File, seq uint64, size int64) error {
	hdr, crc := appendRecord(nil, segmentSeed(seq), recHeader, headerPayload(seq))
	sr := newSegmentReaderAt(f, int64(len(hdr)), crc, size, 4<<10)
	rec, err := sr.next()
	switch {
	case errors.Is(err, errEndOfRecords):
		return nil
	case err != nil:
		return err
	default:
		return fmt.Errorf("%w: the header fails its checksum, yet a valid record of type %d follows it at offset %d",
			ErrCorrupt, rec.typ, rec.off)
	}
}

// sectorSize is the unit a crash persists whole or not at all (see
// checkHeaderlessTail).
const sectorSize = 512

// checkHeaderRecordsTail tells damage from a crash where the records of
// the last segment stop at off, at the record right after its header
// (pos 1) or after the header and a compaction point (pos 2): the
// compaction point and HardState that startSegment writes with the header,
// or, in a segment started on an empty log, the first writes into it.
// Taken for a torn tail there, the segment holds no entry and Open
// replaces it, destroying whatever followed: acknowledged entries and
// HardStates, and the only copy of the compaction point and HardState
// when the segments before it were recycled (the log then reopened empty).
//
// The records there are always fsynced before anything is written after
// them (the header records in one write with the header; Bootstrap, a
// first HardState, which changes the term, or a snapshot in one of their
// own), so a crash that tore them wrote nothing after them. A valid record
// after the one that fails its checksum, chained from the CRC stored in
// it, is one a crash cannot explain, but for two exceptions: records of
// the same write (the HardState after the compaction point among the
// header records, or entries of one batch) can reach the disk while a
// sector in the middle of the damaged record did not; then only a record
// after the header records is evidence. The error names the file and
// wraps ErrCorrupt; nil means nothing tells the tail from a crash's (and
// damage that spoiled the stored CRC, length or type goes undetected).
//
// The stored CRC read is one written under this segment's number, not
// what a recycled spare held: it lies in the first sector, which the
// header checking out shows to have been written with the header records
// or after them, and a segment started on an empty log is never a spare.
func checkHeaderRecordsTail(f vfs.File, seq uint64, off int64, pos int, size int64) error {
	if off+recordHeaderLen > min(size, sectorSize) {
		return nil
	}
	var hdr [recordHeaderLen]byte
	if _, err := f.ReadAt(hdr[:], off); err != nil {
		return fmt.Errorf("read record at %d: %w", off, err)
	}
	n := int64(binary.BigEndian.Uint32(hdr[4:8]))
	typ := hdr[8]
	if typ < recHeader || typ > recSeal || n > size-off-recordHeaderLen {
		return nil // not a record: never written, or its sector lost
	}
	end := off + recordHeaderLen + n
	sr := newSegmentReaderAt(f, end, binary.BigEndian.Uint32(hdr[:4]), size, 4<<10)
	rec, err := sr.next()
	if errors.Is(err, errEndOfRecords) {
		return nil
	}
	if err != nil {
		return err
	}
	// A sector of the damaged record that neither its CRC nor the record
	// after it lies in, which a crash may have lost alone.
	crcSec, lastSec, nextSec := off/sectorSize, (end-1)/sectorSize, end/sectorSize
	lostable := lastSec-crcSec >= 2 || (lastSec-crcSec == 1 && nextSec != lastSec)
	switch {
	case lostable && typ == recEntry:
		// The rest of its batch, not acknowledged if a crash tore it.
		return nil
	case lostable && pos == 1 && typ == recCompaction && rec.typ == recHardState:
		// The HardState of the header records: only a record after it
		// was written after them.
		rec, err = sr.next()
		if errors.Is(err, errEndOfRecords) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %s: the record at offset %d fails its checksum, yet a valid record of type %d follows it at offset %d: damage, not a crash (the file is left as it is)",
		ErrCorrupt, segmentName(seq), off, rec.typ, rec.off)
}

func (r *replay) record(s *segment, rec record) error {
	switch rec.typ {
	case recHeader:
		if len(rec.payload) != 9 {
			return fmt.Errorf("%w: segment header of %d bytes", ErrCorrupt, len(rec.payload))
		}
		if v := rec.payload[0]; v != formatVersion {
			return fmt.Errorf("unsupported format version %d (this binary reads %d)", v, formatVersion)
		}
		if seq := binary.BigEndian.Uint64(rec.payload[1:]); seq != s.seq {
			return fmt.Errorf("%w: segment header says %d", ErrCorrupt, seq)
		}
	case recHardState:
		hs := new(pb.HardState)
		if err := proto.Unmarshal(rec.payload, hs); err != nil {
			return fmt.Errorf("%w: hard state: %v", ErrCorrupt, err)
		}
		r.hs, r.sawHS = hs, true
	case recCompaction, recSnapshot:
		m, err := decodeMeta(rec.payload)
		if err != nil {
			return err
		}
		if m.GetIndex() < r.comp.GetIndex() {
			return fmt.Errorf("%w: compaction point %d below the previous %d", ErrCorrupt, m.GetIndex(), r.comp.GetIndex())
		}
		switch first := r.posFirst(); {
		case rec.typ == recSnapshot || m.GetIndex() >= r.last:
			r.pos, r.last = nil, m.GetIndex()
		case m.GetIndex() >= first:
			r.pos = r.pos[m.GetIndex()-first+1:]
		}
		r.comp = m
		if rec.typ == recSnapshot {
			r.sawSn = true
		} else {
			r.sawComp = true
		}
	case recEntry:
		e := new(pb.Entry)
		if err := proto.Unmarshal(rec.payload, e); err != nil {
			return fmt.Errorf("%w: entry: %v", ErrCorrupt, err)
		}
		i := e.GetIndex()
		switch first := r.posFirst(); {
		case i <= r.comp.GetIndex():
			return fmt.Errorf("%w: entry %d at or below the compaction index %d", ErrCorrupt, i, r.comp.GetIndex())
		case i > r.last+1 || i < first:
			// The entries before it were in recycled segments; the
			// compaction point, at the end, must cover them.
			r.gapEnd = max(r.gapEnd, i-1)
			r.pos = nil
		case i <= r.last:
			r.pos = r.pos[:i-first]
		}
		if k := len(r.pos); k > 0 && e.GetTerm() < r.pos[k-1].term {
			return fmt.Errorf("%w: entry %d has term %d, below the previous term %d", ErrCorrupt, i, e.GetTerm(), r.pos[k-1].term)
		}
		r.pos = append(r.pos, entryPos{seg: s, off: rec.off, n: recordHeaderLen + len(rec.payload), prev: rec.prev, term: e.GetTerm()})
		r.last = i
		r.sawEntry = true
		s.maxEntry = max(s.maxEntry, i)
	case recSeal:
	}
	return nil
}

// posFirst is the index of the first entry in pos.
func (r *replay) posFirst() uint64 { return r.last + 1 - uint64(len(r.pos)) }

// finish checks the replayed state as a whole.
func (r *replay) finish() error {
	if r.gapEnd > r.comp.GetIndex() {
		return fmt.Errorf("%w: entries %d to %d missing", ErrCorrupt, r.comp.GetIndex()+1, r.gapEnd)
	}
	if r.last-r.comp.GetIndex() != uint64(len(r.pos)) {
		return fmt.Errorf("%w: entries %d to %d missing", ErrCorrupt, r.comp.GetIndex()+1, r.last-uint64(len(r.pos)))
	}
	if len(r.pos) > 0 && r.pos[0].term < r.comp.GetTerm() {
		return fmt.Errorf("%w: entry %d has term %d, below the compaction point's term %d", ErrCorrupt, r.comp.GetIndex()+1, r.pos[0].term, r.comp.GetTerm())
	}
	if c := r.hs.GetCommit(); c > r.last {
		return fmt.Errorf("%w: hard state commit %d beyond last index %d", ErrCorrupt, c, r.last)
	}
	return nil
}
