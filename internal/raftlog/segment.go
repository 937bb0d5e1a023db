package raftlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"
)

// Record types. They are part of the on-disk format: never renumber them.
const (
	// recHeader opens every segment: format version (1 byte), then the
	// segment's number (8 bytes, big-endian).
	recHeader byte = 1
	// recEntry is one raft entry, proto-encoded. An entry at an index at or
	// below the last one replaces it and every entry after it.
	recEntry byte = 2
	// recHardState is the HardState, proto-encoded; the last one wins.
	recHardState byte = 3
	// recCompaction is the compaction point (SnapshotMetadata, proto):
	// entries up to its index are discarded.
	recCompaction byte = 4
	// recSnapshot is an applied snapshot's metadata (proto): every entry is
	// discarded and the log continues after its index.
	recSnapshot byte = 5
	// recSeal ends a segment: the next segment carries on. Every segment but
	// the last must end with one.
	recSeal byte = 6
)

// recordHeaderLen is the fixed part of a record: CRC (4 bytes), payload
// length (4 bytes), type (1 byte).
const recordHeaderLen = 9

// maxRecordPayload bounds a record's payload so that a damaged length field
// is recognised as damage instead of becoming a huge allocation. Entries
// are bounded far below it by the memcache protocol's item size limit.
const maxRecordPayload = 1 << 30

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// segmentSeed is the CRC chain's starting value in segment seq. Each
// record's CRC covers the CRC of the record before it, back to the seed, so
// the records a recycled file still holds beyond what was written under its
// new number, chained from other CRCs, never read as valid; and a seed of
// its own for each number keeps that true from the very first record.
func segmentSeed(seq uint64) uint32 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return crc32.Checksum(b[:], crcTable)
}

// recordCRC is the CRC of a record whose header (without its CRC field) is
// hdr and whose payload is payload, chained from prev.
func recordCRC(prev uint32, hdr, payload []byte) uint32 {
	c := crc32.Update(prev, crcTable, hdr)
	return crc32.Update(c, crcTable, payload)
}

// appendRecord appends one record chained from prev to buf and returns the
// extended buffer and the record's CRC.
func appendRecord(buf []byte, prev uint32, typ byte, payload []byte) ([]byte, uint32) {
	start := len(buf)
	buf = append(beginRecord(buf, typ, len(payload)), payload...)
	return endRecord(buf, start, prev)
}

// marshalCached marshals with the size a proto.Size call just computed.
var marshalCached = proto.MarshalOptions{UseCachedSize: true}

// appendProtoRecord is appendRecord for the payload m marshalled, which
// proto.Size said (just before, m unchanged since) is size bytes.
func appendProtoRecord(buf []byte, prev uint32, typ byte, m proto.Message, size int) ([]byte, uint32, error) {
	start := len(buf)
	buf, err := marshalCached.MarshalAppend(beginRecord(buf, typ, size), m)
	if err != nil {
		return buf[:start], prev, fmt.Errorf("encode record of type %d: %w", typ, err)
	}
	if n := len(buf) - start - recordHeaderLen; n != size {
		return buf[:start], prev, fmt.Errorf("encode record of type %d: %d bytes, sized at %d", typ, n, size)
	}
	buf, c := endRecord(buf, start, prev)
	return buf, c, nil
}

// beginRecord appends the header of a record of n payload bytes, its CRC
// left for endRecord.
func beginRecord(buf []byte, typ byte, n int) []byte {
	buf = append(buf, 0, 0, 0, 0)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return append(buf, typ)
}

// endRecord fills in the CRC of the record that starts at buf[start] and
// runs to the end of buf, chained from prev.
func endRecord(buf []byte, start int, prev uint32) ([]byte, uint32) {
	c := recordCRC(prev, buf[start+4:start+recordHeaderLen], buf[start+recordHeaderLen:])
	binary.BigEndian.PutUint32(buf[start:], c)
	return buf, c
}

func headerPayload(seq uint64) []byte {
	b := make([]byte, 0, 9)
	b = append(b, formatVersion)
	return binary.BigEndian.AppendUint64(b, seq)
}

// Segment file names: wal-<16 hex digits>.seg for a segment of the log,
// spare-<16 hex digits>.seg for a file kept for reuse (its number is the
// one it last had; its contents are never read).
const (
	segmentPrefix = "wal-"
	sparePrefix   = "spare-"
	segmentSuffix = ".seg"
	lockName      = "wal.lock"
)

func segmentName(seq uint64) string {
	return fmt.Sprintf("%s%016x%s", segmentPrefix, seq, segmentSuffix)
}

func spareName(seq uint64) string { return fmt.Sprintf("%s%016x%s", sparePrefix, seq, segmentSuffix) }

// parseFileName returns the number in a segment or spare file name, and
// whether name is one.
func parseFileName(name, prefix string) (uint64, bool) {
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, segmentSuffix) {
		return 0, false
	}
	digits := strings.TrimSuffix(strings.TrimPrefix(name, prefix), segmentSuffix)
	if len(digits) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 16, 64)
	if err != nil {
		return 0, false
	}
	return seq, true
}

// record is one record read back from a segment.
type record struct {
	typ     byte
	payload []byte
	off     int64  // where the record starts in its segment
	prev    uint32 // the CRC it is chained from
}

// errEndOfRecords is what readRecord returns where no valid record starts:
// the end of what was written, a torn write, or damage.
var errEndOfRecords = errors.New("raftlog: no valid record")

// segmentReader reads one segment's records in order.
type segmentReader struct {
	r    *bufio.Reader
	size int64
	off  int64
	crc  uint32
	hdr  [recordHeaderLen]byte
}

func newSegmentReader(f vfs.File, seq uint64, size int64) *segmentReader {
	return newSegmentReaderAt(f, 0, segmentSeed(seq), size, 256<<10)
}

// newSegmentReaderAt reads the records of a segment of size bytes from off
// on, the first chained from crc, through a buffer of bufSize bytes.
func newSegmentReaderAt(f vfs.File, off int64, crc uint32, size int64, bufSize int) *segmentReader {
	return &segmentReader{
		r:    bufio.NewReaderSize(io.NewSectionReader(f, off, max(size-off, 0)), bufSize),
		size: size,
		off:  off,
		crc:  crc,
	}
}

// next returns the next record, errEndOfRecords where none is valid, or
// an I/O error.
func (s *segmentReader) next() (record, error) {
	if s.size-s.off < recordHeaderLen {
		return record{}, errEndOfRecords
	}
	if _, err := io.ReadFull(s.r, s.hdr[:]); err != nil {
		return record{}, fmt.Errorf("read record at %d: %w", s.off, err)
	}
	n := int64(binary.BigEndian.Uint32(s.hdr[4:8]))
	typ := s.hdr[8]
	if typ < recHeader || typ > recSeal || n > maxRecordPayload || n > s.size-s.off-recordHeaderLen {
		return record{}, errEndOfRecords
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(s.r, payload); err != nil {
		return record{}, fmt.Errorf("read record at %d: %w", s.off, err)
	}
	c := recordCRC(s.crc, s.hdr[4:], payload)
	if c != binary.BigEndian.Uint32(s.hdr[:4]) {
		return record{}, errEndOfRecords
	}
	rec := record{typ: typ, payload: payload, off: s.off, prev: s.crc}
	s.crc = c
	s.off += recordHeaderLen + n
	return rec, nil
}

// readRecordAt reads and checks the record of n bytes (header included)
// at off in f, chained from prev, and returns its payload.
func readRecordAt(f vfs.File, off int64, n int, prev uint32) (byte, []byte, error) {
	if n < recordHeaderLen {
		return 0, nil, fmt.Errorf("%w: record of %d bytes at %d", ErrCorrupt, n, off)
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil {
		return 0, nil, fmt.Errorf("read record at %d: %w", off, err)
	}
	payload := buf[recordHeaderLen:]
	if int(binary.BigEndian.Uint32(buf[4:8])) != len(payload) ||
		recordCRC(prev, buf[4:recordHeaderLen], payload) != binary.BigEndian.Uint32(buf[:4]) {
		return 0, nil, fmt.Errorf("%w: record at %d fails its checksum", ErrCorrupt, off)
	}
	return buf[8], payload, nil
}
