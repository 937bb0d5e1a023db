package raftlog

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrCorrupt is wrapped by every error reporting on-disk data that violates
// the log's invariants (a missing or undecodable entry, a gap, a bad key).
var ErrCorrupt = errors.New("raftlog: corrupt log data")

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("raftlog: log is closed")

// Log is the durable Raft log. It implements raft.Storage.
type Log struct {
	fs           vfs.FS
	dir          string
	lock         io.Closer
	logger       *slog.Logger
	segmentBytes int64
	maxSpares    int
	// prefillSpares: new segment files are written full of zeros, in the
	// background, before they are used (see prepareSpare).
	prefillSpares bool
	prepWG        sync.WaitGroup

	// mu guards everything below. Writers hold it across the write and the
	// fsync so that readers always see memory and disk agree.
	mu     sync.Mutex
	closed bool
	// hardState is the last saved HardState; never nil.
	hardState *pb.HardState
	// compaction is the compaction point: Index and Term of the last
	// discarded entry (0, 0 for a log that never compacted) and the ConfState
	// as of Index; never nil, ConfState never nil. FirstIndex is Index+1.
	compaction *pb.SnapshotMetadata
	// lastIndex is the index of the last entry, compaction.Index when the
	// log holds no entries.
	lastIndex uint64
	// empty is true until something is written to a fresh log.
	empty bool
	cache *tailCache
	// pos[k] says where the entry at index compaction.Index+1+k is on disk.
	pos []entryPos
	// segs are the live segment files, oldest first; records are appended to
	// the last one, at off, chained from crc. headerEnd is where its header
	// records end: a segment holding only those is never left for a new one.
	segs      []*segment
	off       int64
	crc       uint32
	headerEnd int64
	// spares are the numbers of files kept for reuse as new segments.
	spares []uint64
	// fresh is set when the segment written was created rather than reused:
	// its blocks are allocated as they are written, which makes each fsync
	// costlier, so the log moves on as soon as a spare is ready.
	fresh bool
	// preparing is set while a spare is being prefilled.
	preparing bool
	// prefillGaveUp is set when prefilling a spare failed or was skipped
	// (too little free space) during the segment written, reset when the
	// next one starts: retried at every write, a disk short of a segment
	// was filled to the brim again and again, failing the state store's
	// writes with ENOSPC.
	prefillGaveUp bool
	buf           []byte
	// observeSync is Options.ObserveSync (may be nil).
	observeSync func(time.Duration)
	stats       struct {
		syncCount    uint64
		syncDuration time.Duration
		compactions  uint64
	}

	// Stats reads these without mu, which a writer holds across its fsync:
	// a metrics scrape must not wait on a disk that stopped answering.
	// entryDiskReads is counted by readers, syncStarted (Unix ns, 0 when
	// none) is set around each fsync, and published is refreshed by every
	// writer before it releases mu (unlock).
	entryDiskReads atomic.Uint64
	syncStarted    atomic.Int64
	statsMu        sync.Mutex
	published      published
}

// segment is one live segment file.
type segment struct {
	seq uint64
	f   vfs.File
	// maxEntry is the highest index of any entry record in the segment: once
	// the log is compacted up to it, nothing in the segment is needed.
	maxEntry uint64
}

// entryPos locates one entry's record.
type entryPos struct {
	seg  *segment
	off  int64
	n    int    // record length, header included
	prev uint32 // CRC the record is chained from
	term uint64
}

var _ raft.Storage = (*Log)(nil)

// InitialState implements raft.Storage. It returns the saved HardState (an
// empty one if none was saved) and the ConfState of the compaction point.
//
// If the saved commit index is below the compaction point (a crash between
// ApplySnapshot and the Save of the HardState that follows it), the commit
// index returned is the compaction index: a snapshot only ever covers
// committed entries, and raft refuses a commit index below its snapshot.
func (l *Log) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, ErrClosed
	}
	hs := proto.Clone(l.hardState).(*pb.HardState)
	if !isEmptyHardState(hs) && hs.GetCommit() < l.compaction.GetIndex() {
		hs.Commit = new(l.compaction.GetIndex())
	}
	cs := proto.Clone(l.compaction.GetConfState()).(*pb.ConfState)
	return hs, cs, nil
}

// Entries implements raft.Storage: the entries [lo, hi), at least one if
// any, and no more than fit in maxSize bytes of proto encoding. It returns
// raft.ErrCompacted if lo < FirstIndex and raft.ErrUnavailable if the log
// holds no entries or hi > LastIndex+1. The returned slice is freshly
// allocated: the caller may append to it, but must not mutate the entries.
func (l *Log) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	first := l.firstIndex()
	if lo < first {
		return nil, raft.ErrCompacted
	}
	if l.lastIndex < first || hi > l.lastIndex+1 {
		return nil, raft.ErrUnavailable
	}
	if lo > hi {
		return nil, fmt.Errorf("raftlog: entries [%d, %d): lo > hi", lo, hi)
	}
	out := make([]*pb.Entry, 0, min(hi-lo, 256))
	var size uint64
	// add reports whether e was taken; it refuses an entry that would make
	// the total exceed maxSize, except the first.
	add := func(e *pb.Entry, n int) bool {
		if len(out) > 0 && size+uint64(n) > maxSize {
			return false
		}
		out = append(out, e)
		size += uint64(n)
		return true
	}
	next := lo
	if cacheFirst := l.cache.firstIndex(); l.cache.len() == 0 || next < cacheFirst {
		end := hi
		if l.cache.len() > 0 {
			end = min(hi, cacheFirst)
		}
		var full bool
		var err error
		next, full, err = l.readEntries(next, end, add)
		if err != nil {
			return nil, fmt.Errorf("raftlog: entries [%d, %d): %w", lo, hi, err)
		}
		if full {
			return out, nil
		}
	}
	for ; next < hi; next++ {
		ce, ok := l.cache.get(next)
		if !ok {
			return nil, fmt.Errorf("raftlog: entries [%d, %d): entry %d missing from the tail cache", lo, hi, next)
		}
		if !add(ce.e, ce.size) {
			break
		}
	}
	return out, nil
}

// Term implements raft.Storage. Term(FirstIndex()-1) answers the term of the
// compaction point; older indexes give raft.ErrCompacted, indexes beyond
// LastIndex raft.ErrUnavailable.
func (l *Log) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	return l.term(i)
}

// term is Term with l.mu held.
func (l *Log) term(i uint64) (uint64, error) {
	switch c := l.compaction.GetIndex(); {
	case i < c:
		return 0, raft.ErrCompacted
	case i == c:
		return l.compaction.GetTerm(), nil
	case i > l.lastIndex:
		return 0, raft.ErrUnavailable
	}
	return l.pos[i-l.firstIndex()].term, nil
}

// LastIndex implements raft.Storage.
func (l *Log) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	return l.lastIndex, nil
}

// FirstIndex implements raft.Storage. It is the compaction index + 1, also
// when the log holds no entries (then FirstIndex == LastIndex+1).
func (l *Log) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	return l.firstIndex(), nil
}

func (l *Log) firstIndex() uint64 { return l.compaction.GetIndex() + 1 }

// Snapshot implements raft.Storage. It returns the metadata of the
// compaction point (index, term, ConfState) with no Data: the state itself is
// streamed out of band by the replica, which takes it from the state machine.
func (l *Log) Snapshot() (*pb.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	return &pb.Snapshot{Metadata: proto.Clone(l.compaction).(*pb.SnapshotMetadata)}, nil
}

// IsEmpty reports whether nothing was ever written to the log (a fresh data
// directory): the caller then bootstraps it.
func (l *Log) IsEmpty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.empty
}

// Close closes the segment files. Later calls return ErrClosed; closing
// twice is not an error.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	// The spare being prefilled, if any, is finished (or stopped) first:
	// it takes the lock to add itself to the spares.
	l.mu.Unlock()
	l.prepWG.Wait()
	l.mu.Lock()
	l.cache.reset()
	var errs []error
	for _, s := range l.segs {
		errs = append(errs, s.f.Close())
	}
	l.segs, l.pos = nil, nil
	errs = append(errs, l.lock.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("raftlog: close: %w", err)
	}
	return nil
}

// readEntry reads the entry at index i from its segment; l.mu held.
func (l *Log) readEntry(i uint64) (*pb.Entry, int, error) {
	k := i - l.firstIndex()
	if i < l.firstIndex() || k >= uint64(len(l.pos)) {
		return nil, 0, fmt.Errorf("%w: entry %d missing", ErrCorrupt, i)
	}
	p := l.pos[k]
	typ, v, err := readRecordAt(p.seg.f, p.off, p.n, p.prev)
	if err != nil {
		return nil, 0, fmt.Errorf("entry %d in segment %d: %w", i, p.seg.seq, err)
	}
	if typ != recEntry {
		return nil, 0, fmt.Errorf("%w: entry %d: record of type %d", ErrCorrupt, i, typ)
	}
	l.entryDiskReads.Add(1)
	e, err := decodeEntry(i, v)
	return e, len(v), err
}

// readEntries reads entries lo..end-1 from disk in order, passing each to
// add until add refuses one. It returns the next index not taken and whether
// add refused one. l.mu held.
func (l *Log) readEntries(lo, end uint64, add func(*pb.Entry, int) bool) (next uint64, full bool, err error) {
	for next = lo; next < end; next++ {
		e, n, err := l.readEntry(next)
		if err != nil {
			return next, false, err
		}
		if !add(e, n) {
			return next, true, nil
		}
	}
	return next, false, nil
}

// decodeEntry decodes the entry expected at index i.
func decodeEntry(i uint64, v []byte) (*pb.Entry, error) {
	e := new(pb.Entry)
	if err := proto.Unmarshal(v, e); err != nil {
		return nil, fmt.Errorf("%w: entry %d: %v", ErrCorrupt, i, err)
	}
	if e.GetIndex() != i {
		return nil, fmt.Errorf("%w: entry expected at %d has index %d", ErrCorrupt, i, e.GetIndex())
	}
	return e, nil
}

func isEmptyHardState(hs *pb.HardState) bool {
	return hs.GetTerm() == 0 && hs.GetVote() == 0 && hs.GetCommit() == 0
}
