// Package snapfile owns kvd's backup file format: the bytes `kvd snapshot
// save` writes and `kvd snapshot status` and `kvd snapshot restore` read
// (docs/backup.md describes it for people). It is pure: no network, no
// store, no clock; the member that serves a snapshot encodes with Writer,
// and the CLI and the restore decode with Reader, each on one goroutine.
//
// A file is a header, the items in key order, and a trailer:
//
//	header  "KVDSNAP\n" | version u16 | length u32 | fields (length bytes)
//	record  'I' | key len u8 | key | flags u32 | expires i64 | value len u32 | value
//	trailer 'E' | items u64 | value bytes u64 | CRC-32C u32
//
// Integers are big-endian. The CRC-32C (Castagnoli) covers every byte
// before it, from the magic on; nothing may follow it. The format is
// versioned so that a newer kvd can change it and an older one says so
// instead of misreading it.
package snapfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// Version is the format this binary writes; Reader accepts versions up
// to it.
const Version uint16 = 1

// Magic starts every file.
const Magic = "KVDSNAP\n"

// Limits a reader checks before it believes a length.
const (
	// MaxKeyLen is memcached's (and kvd's) key limit.
	MaxKeyLen = 250
	// MaxValueLen bounds one value; kvd's --max-item-size is at most 128 MiB.
	MaxValueLen = 1 << 30
	// maxHeaderLen bounds the header's fields.
	maxHeaderLen = 64 << 10
	// maxString bounds one string field of the header.
	maxString = 1024
)

// Errors a reader names; each is wrapped with where it was found.
var (
	ErrNotSnapshot = errors.New("not a kvd snapshot file (bad magic)")
	ErrNewerFormat = errors.New("snapshot format is newer than this kvd reads")
	ErrTruncated   = errors.New("snapshot file is truncated")
	ErrChecksum    = errors.New("snapshot checksum mismatch: the file is damaged")
	ErrCorrupt     = errors.New("snapshot file is malformed")
)

// Header describes a snapshot: where and when it was taken, and how much
// it holds (estimates, for progress; the trailer's counts are exact).
type Header struct {
	// KVDVersion is the release of the member that wrote it.
	KVDVersion string
	// ClusterID is the cluster's ID (cluster.json), Member the name of the
	// member that served it.
	ClusterID uint64
	Member    string
	// Applied is the raft index the data is the state as of; Term the
	// member's raft term when it took it (information only).
	Applied, Term uint64
	// ClusterVersion is the replicated cluster version at Applied.
	ClusterVersion uint64
	// CreatedNs is when the member took it (Unix ns, its clock): items
	// expired by then are not in the file.
	CreatedNs int64
	// ItemsEstimate and BytesEstimate are the store's item count and value
	// bytes at Applied, expired items not yet swept included: an upper
	// bound for progress.
	ItemsEstimate, BytesEstimate uint64
}

// Record is one item.
type Record struct {
	Key   []byte
	Flags uint32
	// ExpiresAt is the absolute expiry in Unix nanoseconds; 0: never.
	ExpiresAt int64
	Value     []byte
}

// Trailer closes a file: exact counts and the checksum.
type Trailer struct {
	Items, ValueBytes uint64
	CRC               uint32
}

const (
	tagItem = 'I'
	tagEnd  = 'E'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Writer encodes one snapshot onto an io.Writer. It buffers; Close writes
// the trailer and flushes.
type Writer struct {
	bw      *bufio.Writer
	crc     hash.Hash32
	tr      Trailer
	scratch []byte
	err     error
}

// NewWriter writes the header of h to w.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	crc := crc32.New(castagnoli)
	sw := &Writer{bw: bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10), crc: crc}
	body, err := encodeHeader(h)
	if err != nil {
		return nil, err
	}
	b := append([]byte(Magic), 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint16(b[len(Magic):], Version)
	binary.BigEndian.PutUint32(b[len(Magic)+2:], uint32(len(body)))
	b = append(b, body...)
	if _, err := sw.bw.Write(b); err != nil {
		return nil, fmt.Errorf("write snapshot header: %w", err)
	}
	return sw, nil
}

func encodeHeader(h Header) ([]byte, error) {
	var b []byte
	for _, s := range []string{h.KVDVersion, h.Member} {
		if len(s) > maxString {
			return nil, fmt.Errorf("snapshot header: string of %d bytes exceeds %d", len(s), maxString)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	for _, v := range []uint64{h.ClusterID, h.Applied, h.Term, h.ClusterVersion, uint64(h.CreatedNs), h.ItemsEstimate, h.BytesEstimate} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b, nil
}

// Add writes one item. Its key and value are copied out before it returns.
func (w *Writer) Add(r Record) error {
	if w.err != nil {
		return w.err
	}
	if len(r.Key) == 0 || len(r.Key) > MaxKeyLen {
		return fmt.Errorf("snapshot: key of %d bytes (want 1 to %d)", len(r.Key), MaxKeyLen)
	}
	if len(r.Value) > MaxValueLen {
		return fmt.Errorf("snapshot: value of %d bytes exceeds %d", len(r.Value), MaxValueLen)
	}
	if r.ExpiresAt < 0 {
		return fmt.Errorf("snapshot: negative expiry %d for %q", r.ExpiresAt, r.Key)
	}
	b := append(w.scratch[:0], tagItem, byte(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.BigEndian.AppendUint32(b, r.Flags)
	b = binary.BigEndian.AppendUint64(b, uint64(r.ExpiresAt))
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Value)))
	w.scratch = b
	if _, err := w.bw.Write(b); err != nil {
		w.err = fmt.Errorf("write snapshot record: %w", err)
		return w.err
	}
	if _, err := w.bw.Write(r.Value); err != nil {
		w.err = fmt.Errorf("write snapshot record: %w", err)
		return w.err
	}
	w.tr.Items++
	w.tr.ValueBytes += uint64(len(r.Value))
	return nil
}

// Close writes the trailer and flushes; it returns the trailer written.
// It does not close the underlying writer.
func (w *Writer) Close() (Trailer, error) {
	if w.err != nil {
		return Trailer{}, w.err
	}
	b := []byte{tagEnd}
	b = binary.BigEndian.AppendUint64(b, w.tr.Items)
	b = binary.BigEndian.AppendUint64(b, w.tr.ValueBytes)
	if _, err := w.bw.Write(b); err != nil {
		return Trailer{}, fmt.Errorf("write snapshot trailer: %w", err)
	}
	// Everything before the checksum is in the hash once it is flushed.
	if err := w.bw.Flush(); err != nil {
		return Trailer{}, fmt.Errorf("write snapshot trailer: %w", err)
	}
	w.tr.CRC = w.crc.Sum32()
	b = binary.BigEndian.AppendUint32(b[:0], w.tr.CRC)
	if _, err := w.bw.Write(b); err != nil {
		return Trailer{}, fmt.Errorf("write snapshot trailer: %w", err)
	}
	if err := w.bw.Flush(); err != nil {
		return Trailer{}, fmt.Errorf("write snapshot trailer: %w", err)
	}
	w.err = errors.New("snapshot writer is closed")
	return w.tr, nil
}
