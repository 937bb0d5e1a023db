package raftlog

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// pending is a record about to be written: payload, or msg marshalled
// (into size bytes) straight into the write buffer. Every protobuf record
// takes the second form (protoRecord): marshalled apart, each entry cost
// an allocation of its size, zeroed, and a copy into the buffer, which
// for 8 KiB values was a fifth of all kvd allocated (bench/RESULTS-core.md).
type pending struct {
	typ     byte
	payload []byte
	msg     proto.Message
	size    int
}

func (r pending) payloadLen() int {
	if r.msg != nil {
		return r.size
	}
	return len(r.payload)
}

// protoRecord is a record of m, marshalled by write. m must not change
// until then: its size is taken now.
func protoRecord(typ byte, m proto.Message) pending {
	return pending{typ: typ, msg: m, size: proto.Size(m)}
}

// write appends recs to the last segment in one write, first moving on to a
// new segment if they would overflow this one, and fsyncs when sync is set.
// It returns where each record went. On error nothing is known of what
// reached the disk and the write state is left as it was (the caller treats
// the error as fatal). l.mu held.
func (l *Log) write(recs []pending, sync bool) ([]entryPos, error) {
	var total int64
	for _, r := range recs {
		total += recordHeaderLen + int64(r.payloadLen())
	}
	if l.off > l.headerEnd && (l.off+total > l.segmentBytes || (l.fresh && len(l.spares) > 0)) {
		if err := l.rotate(); err != nil {
			return nil, err
		}
	}
	seg := l.segs[len(l.segs)-1]
	buf := l.buf[:0]
	crc := l.crc
	out := make([]entryPos, len(recs))
	for i, r := range recs {
		start := len(buf)
		prev := crc
		if r.msg != nil {
			var err error
			if buf, crc, err = appendProtoRecord(buf, crc, r.typ, r.msg, r.size); err != nil {
				return nil, err
			}
		} else {
			buf, crc = appendRecord(buf, crc, r.typ, r.payload)
		}
		out[i] = entryPos{seg: seg, off: l.off + int64(start), n: len(buf) - start, prev: prev}
	}
	if cap(buf) <= 4<<20 {
		l.buf = buf // reused by the next write; a rare huge batch is not kept
	}
	if _, err := seg.f.WriteAt(buf, l.off); err != nil {
		return nil, fmt.Errorf("write segment %d at %d: %w", seg.seq, l.off, err)
	}
	if sync {
		if err := l.sync(seg); err != nil {
			return nil, err
		}
	}
	l.off += int64(len(buf))
	l.crc = crc
	if l.fresh && l.off >= min(1<<20, l.segmentBytes/4) {
		// Only once the log is written to in earnest: a node that writes
		// little, or only starts, does not write a segment of zeros.
		l.prepareSpare()
	}
	return out, nil
}

// sync fsyncs seg's data and accounts for it. The segment's size does not
// change for writes within its preallocated length, so fdatasync has no
// metadata to write: that is most of why this log is not kept in Pebble.
func (l *Log) sync(seg *segment) error {
	start := time.Now()
	l.syncStarted.Store(start.UnixNano())
	err := seg.f.SyncData()
	l.syncStarted.Store(0)
	d := time.Since(start)
	l.stats.syncCount++
	l.stats.syncDuration += d
	if l.observeSync != nil {
		l.observeSync(d)
	}
	if err != nil {
		return fmt.Errorf("fsync segment %d: %w", seg.seq, err)
	}
	return nil
}

// rotate seals the last segment and starts the next one, then recycles the
// segments the log no longer needs. l.mu held.
//
// The order is what keeps every crash recoverable: the seal is fsynced
// before the new segment exists, the new segment's name is made durable
// before anything is written to it, and its header (which repeats the hard
// state and the compaction point) is fsynced before any older segment is
// recycled, so that the segments left always hold the whole log.
func (l *Log) rotate() error {
	cur := l.segs[len(l.segs)-1]
	seal, _ := appendRecord(nil, l.crc, recSeal, nil)
	if _, err := cur.f.WriteAt(seal, l.off); err != nil {
		return fmt.Errorf("seal segment %d: %w", cur.seq, err)
	}
	if err := l.sync(cur); err != nil {
		return fmt.Errorf("seal segment %d: %w", cur.seq, err)
	}
	if err := l.startSegment(cur.seq + 1); err != nil {
		return err
	}
	return l.recycle()
}

// startSegment makes segment seq the one written: a spare file renamed, or a
// new file, with its header records fsynced. l.mu held.
func (l *Log) startSegment(seq uint64) error {
	name := l.fs.PathJoin(l.dir, segmentName(seq))
	var f vfs.File
	var err error
	// A spare is reused only under a higher number than it had: records it
	// held can then never pass for this segment's (see segmentSeed).
	if n := len(l.spares); n > 0 && l.spares[n-1] < seq {
		spare := l.fs.PathJoin(l.dir, spareName(l.spares[n-1]))
		if err := l.fs.Rename(spare, name); err != nil {
			return fmt.Errorf("reuse %s as segment %d: %w", spare, seq, err)
		}
		l.spares = l.spares[:n-1]
		l.fresh = false
		f, err = l.fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	} else {
		l.fresh = true
		f, err = l.createFile(name)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("create segment %d: %w", seq, err), closeIfOpen(f))
	}
	if err := l.syncDir(); err != nil {
		return errors.Join(err, f.Close())
	}
	return l.writeHeader(seq, f)
}

// createFile creates name, preallocated so that the writes to come stay
// within the file's length (a spare is already that long).
func (l *Log) createFile(name string) (vfs.File, error) {
	f, err := l.fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	if err := f.Preallocate(0, l.segmentBytes); err != nil {
		return nil, errors.Join(fmt.Errorf("preallocate: %w", err), f.Close())
	}
	return f, nil
}

// writeHeader makes f the file of segment seq, the one written, and writes
// its header records, fsynced. l.mu held.
func (l *Log) writeHeader(seq uint64, f vfs.File) error {
	seg := &segment{seq: seq, f: f}
	l.segs = append(l.segs, seg)
	l.off, l.crc, l.headerEnd = 0, segmentSeed(seq), 0
	l.prefillGaveUp = false
	recs := []pending{{typ: recHeader, payload: headerPayload(seq)}}
	if !l.empty {
		// The segment can be read without the ones before it.
		recs = append(recs, protoRecord(recCompaction, l.compaction), protoRecord(recHardState, l.hardState))
	}
	if _, err := l.write(recs, true); err != nil {
		return fmt.Errorf("start segment %d: %w", seq, err)
	}
	l.headerEnd = l.off
	return nil
}

// replaceTempName is the file replaceLast writes a segment's replacement
// in; Open removes a leftover one.
const replaceTempName = "segment-replace.tmp"

// replaceLast replaces the last segment, which holds no entry and no
// snapshot (Open checked), by a new file under the same number holding
// only header records: they repeat the compaction point and HardState
// replayed, which is all the old file added to the log. Open does this
// instead of rotating so that restarts which write nothing (a crash loop,
// rolling restarts of an idle cluster) do not add a segment file, and the
// disk it reserves, each time. l.mu held.
//
// The guarantee of rotating is kept: whatever a crash tore after the old
// file's last whole record goes with the file and is never read again. The
// new file is created, not a spare: it holds nothing chained under this
// number. It is written and fsynced under a temporary name and then renamed
// over the old one, so that at every instant of a crash one of the two
// files, each holding the same state, is the segment: the old file may be
// the only one left holding the compaction point and HardState (rotate
// recycles the segments before it).
func (l *Log) replaceLast() error {
	old := l.segs[len(l.segs)-1]
	l.segs = l.segs[:len(l.segs)-1]
	if err := old.f.Close(); err != nil {
		return fmt.Errorf("replace segment %d: close: %w", old.seq, err)
	}
	tmp := l.fs.PathJoin(l.dir, replaceTempName)
	f, err := l.createFile(tmp)
	if err != nil {
		return fmt.Errorf("replace segment %d: create %s: %w", old.seq, tmp, err)
	}
	l.fresh = true
	// From here f is in l.segs: closed with them on error.
	if err := l.writeHeader(old.seq, f); err != nil {
		return fmt.Errorf("replace segment %d: %w", old.seq, err)
	}
	if err := l.fs.Rename(tmp, l.fs.PathJoin(l.dir, segmentName(old.seq))); err != nil {
		return fmt.Errorf("replace segment %d: %w", old.seq, err)
	}
	if err := l.syncDir(); err != nil {
		return fmt.Errorf("replace segment %d: %w", old.seq, err)
	}
	return nil
}

// prepTempName is the file a spare is prefilled in; Open removes a
// leftover one.
const prepTempName = "spare-prefill.tmp"

// prepareSpare starts prefilling a spare in the background when there is
// none and none is being prefilled: a file of SegmentBytes zeros, fsynced, so that the segment made of
// it is written over rather than extended, and its fsyncs write no
// metadata. Until it is ready new segments are created preallocated, and
// written at the slower pace of first writes. l.mu held.
func (l *Log) prepareSpare() {
	if !l.prefillSpares || l.preparing || l.closed || len(l.spares) > 0 || l.prefillGaveUp {
		return
	}
	l.preparing = true
	l.prepWG.Add(1)
	go func() {
		defer l.prepWG.Done()
		tmp := l.fs.PathJoin(l.dir, prepTempName)
		err := l.prefill(tmp)
		l.mu.Lock()
		defer l.unlock()
		l.preparing = false
		if err == nil && !l.closed && len(l.spares) < l.maxSpares {
			// Named after the segment being written: above every spare
			// (recycled segments are older), below every segment it can
			// become (see startSegment), and taken by the next rotation,
			// before this segment can be recycled under the same name.
			num := l.segs[len(l.segs)-1].seq
			if err = l.fs.Rename(tmp, l.fs.PathJoin(l.dir, spareName(num))); err == nil {
				l.spares = append(l.spares, num)
				return
			}
		}
		if err != nil && !errors.Is(err, errClosedWhilePrefilling) {
			// Not again before the next segment: see prefillGaveUp.
			l.prefillGaveUp = true
			l.logger.Warn("no spare raft log segment prefilled; new segments are preallocated instead", "err", err)
		}
		_ = l.fs.Remove(tmp)
	}()
}

// prefill writes tmp full of zeros and fsyncs it, without l.mu. The rename
// into a spare's name is made durable by the directory fsync of the
// rotation that uses it.
//
// It writes nothing when the disk has less than two segments free: the
// spare would leave it (nearly) full, and the state store beside the log
// failing its writes for want of space stops the node. The log runs on
// preallocated segments instead. A file system that cannot tell its free
// space is prefilled on.
func (l *Log) prefill(tmp string) error {
	if u, err := l.fs.GetDiskUsage(l.dir); err == nil && u.AvailBytes < 2*uint64(l.segmentBytes) {
		return fmt.Errorf("not prefilling %s: %d bytes free on the disk, less than two segments of %d", tmp, u.AvailBytes, l.segmentBytes)
	}
	f, err := l.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	zeros := make([]byte, 1<<20)
	for n := int64(0); n < l.segmentBytes; n += int64(len(zeros)) {
		if l.isClosed() {
			return errors.Join(errClosedWhilePrefilling, f.Close())
		}
		if _, err := f.Write(zeros[:min(int64(len(zeros)), l.segmentBytes-n)]); err != nil {
			return errors.Join(fmt.Errorf("write %s: %w", tmp, err), f.Close())
		}
	}
	if err := f.SyncData(); err != nil {
		return errors.Join(fmt.Errorf("fsync %s: %w", tmp, err), f.Close())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	return nil
}

var errClosedWhilePrefilling = errors.New("raftlog: log closed while prefilling")

func (l *Log) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func closeIfOpen(f vfs.File) error {
	if f == nil {
		return nil
	}
	return f.Close()
}

// recycle retires the oldest segments whose entries are all compacted: they
// become spares for the segments to come, or are removed beyond maxSpares.
// Only a prefix of the segments is ever retired, and never the one written,
// so the segments left are consecutive and hold the whole log. Each
// retirement is made durable before the next: a file system may otherwise
// persist a later rename without an earlier one, leaving a gap that Open
// would take for damage. l.mu held.
func (l *Log) recycle() error {
	for len(l.segs) > 1 && l.segs[0].maxEntry <= l.compaction.GetIndex() {
		s := l.segs[0]
		// A file shorter than a segment was created and only partly
		// written: writing over it would extend it. It is not kept.
		st, err := s.f.Stat()
		if err != nil {
			return fmt.Errorf("recycle segment %d: %w", s.seq, err)
		}
		if err := s.f.Close(); err != nil {
			return fmt.Errorf("recycle segment %d: %w", s.seq, err)
		}
		l.segs = l.segs[1:]
		name := l.fs.PathJoin(l.dir, segmentName(s.seq))
		if len(l.spares) < l.maxSpares && st.Size() >= l.segmentBytes && !slices.Contains(l.spares, s.seq) {
			if err := l.fs.Rename(name, l.fs.PathJoin(l.dir, spareName(s.seq))); err != nil {
				return fmt.Errorf("recycle segment %d: %w", s.seq, err)
			}
			l.spares = append(l.spares, s.seq)
			slices.Sort(l.spares)
		} else if err := l.fs.Remove(name); err != nil {
			return fmt.Errorf("remove segment %d: %w", s.seq, err)
		}
		if err := l.syncDir(); err != nil {
			return fmt.Errorf("recycle segment %d: %w", s.seq, err)
		}
	}
	return nil
}

func (l *Log) syncDir() error {
	d, err := l.fs.OpenDir(l.dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", l.dir, err)
	}
	if err := d.Sync(); err != nil {
		return errors.Join(fmt.Errorf("fsync directory %s: %w", l.dir, err), d.Close())
	}
	return d.Close()
}

// decodeMeta decodes a compaction point or snapshot record.
func decodeMeta(v []byte) (*pb.SnapshotMetadata, error) {
	m := new(pb.SnapshotMetadata)
	if err := proto.Unmarshal(v, m); err != nil {
		return nil, fmt.Errorf("%w: compaction point: %v", ErrCorrupt, err)
	}
	if m.Index == nil || m.Term == nil || m.ConfState == nil {
		return nil, fmt.Errorf("%w: compaction point lacks index, term or conf state", ErrCorrupt)
	}
	return m, nil
}
