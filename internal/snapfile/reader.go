package snapfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
)

// Reader decodes a snapshot. It checks every length against its limit
// before it believes it and grows a value's buffer only as the bytes
// arrive, so a damaged length costs an error, not memory. Records are
// handed out before the checksum at the end is seen: a caller that must
// not act on a damaged file reads it through once (Verify) first, or
// undoes what it did when Next fails.
type Reader struct {
	br      *bufio.Reader
	crc     hash.Hash32
	off     int64 // bytes consumed, for errors and progress
	hdr     Header
	version uint16
	tr      Trailer
	done    bool
	key     []byte
	val     []byte
	items   uint64
	bytes   uint64
}

// NewReader reads and checks the header.
func NewReader(r io.Reader) (*Reader, error) {
	sr := &Reader{br: bufio.NewReaderSize(r, 256<<10), crc: crc32.New(castagnoli)}
	var pre [len(Magic) + 6]byte
	if err := sr.full(pre[:len(Magic)], "magic"); err != nil {
		if errors.Is(err, ErrTruncated) && sr.off == 0 {
			return nil, fmt.Errorf("%w: the file is empty", ErrTruncated)
		}
		return nil, err
	}
	if string(pre[:len(Magic)]) != Magic {
		return nil, ErrNotSnapshot
	}
	if err := sr.full(pre[len(Magic):], "header"); err != nil {
		return nil, err
	}
	sr.version = binary.BigEndian.Uint16(pre[len(Magic):])
	if sr.version > Version {
		return nil, fmt.Errorf("%w: format version %d, this kvd reads up to %d; use a newer kvd", ErrNewerFormat, sr.version, Version)
	}
	if sr.version == 0 {
		return nil, fmt.Errorf("%w: format version 0", ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(pre[len(Magic)+2:])
	if n > maxHeaderLen {
		return nil, fmt.Errorf("%w: header of %d bytes exceeds %d", ErrCorrupt, n, maxHeaderLen)
	}
	body := make([]byte, n)
	if err := sr.full(body, "header"); err != nil {
		return nil, err
	}
	h, err := decodeHeader(body)
	if err != nil {
		return nil, err
	}
	sr.hdr = h
	return sr, nil
}

func decodeHeader(b []byte) (Header, error) {
	var h Header
	strs := []*string{&h.KVDVersion, &h.Member}
	for _, s := range strs {
		if len(b) < 2 {
			return Header{}, fmt.Errorf("%w: header too short", ErrCorrupt)
		}
		n := int(binary.BigEndian.Uint16(b))
		if n > maxString || len(b) < 2+n {
			return Header{}, fmt.Errorf("%w: header string of %d bytes", ErrCorrupt, n)
		}
		*s = string(b[2 : 2+n])
		b = b[2+n:]
	}
	var created uint64
	nums := []*uint64{&h.ClusterID, &h.Applied, &h.Term, &h.ClusterVersion, &created, &h.ItemsEstimate, &h.BytesEstimate}
	// A later version of the same format may append fields: the header's
	// length says where it ends, and only what this version knows is read.
	if len(b) < 8*len(nums) {
		return Header{}, fmt.Errorf("%w: header too short", ErrCorrupt)
	}
	for i, v := range nums {
		*v = binary.BigEndian.Uint64(b[8*i:])
	}
	h.CreatedNs = int64(created)
	if len(b) != 8*len(nums) {
		return Header{}, fmt.Errorf("%w: %d unknown header bytes in format version %d", ErrCorrupt, len(b)-8*len(nums), Version)
	}
	return h, nil
}

// Header is the file's header.
func (r *Reader) Header() Header { return r.hdr }

// Offset is how many bytes have been read.
func (r *Reader) Offset() int64 { return r.off }

// Trailer is the file's trailer, once Next has returned io.EOF.
func (r *Reader) Trailer() Trailer { return r.tr }

// full reads len(b) bytes into b and hashes them.
func (r *Reader) full(b []byte, what string) error {
	n, err := io.ReadFull(r.br, b)
	r.off += int64(n)
	r.crc.Write(b[:n])
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: the file ends inside the %s at byte %d", ErrTruncated, what, r.off)
	}
	if err != nil {
		return fmt.Errorf("read snapshot %s at byte %d: %w", what, r.off, err)
	}
	return nil
}

// Next returns the next item, or io.EOF once the trailer was read and
// checked: the counts match, the checksum matches and nothing follows it.
// The record's Key and Value are valid until the next call.
func (r *Reader) Next() (Record, error) {
	if r.done {
		return Record{}, io.EOF
	}
	var tag [1]byte
	if err := r.full(tag[:], "record tag"); err != nil {
		return Record{}, err
	}
	switch tag[0] {
	case tagItem:
		return r.item()
	case tagEnd:
		return Record{}, r.trailer()
	default:
		return Record{}, fmt.Errorf("%w: unknown record tag %#x at byte %d", ErrCorrupt, tag[0], r.off-1)
	}
}

func (r *Reader) item() (Record, error) {
	var kl [1]byte
	if err := r.full(kl[:], "record"); err != nil {
		return Record{}, err
	}
	if kl[0] == 0 || int(kl[0]) > MaxKeyLen {
		return Record{}, fmt.Errorf("%w: key length %d at byte %d", ErrCorrupt, kl[0], r.off-1)
	}
	r.key = grow(r.key[:0], int(kl[0]))
	if err := r.full(r.key, "record"); err != nil {
		return Record{}, err
	}
	var fixed [4 + 8 + 4]byte
	if err := r.full(fixed[:], "record"); err != nil {
		return Record{}, err
	}
	rec := Record{Key: r.key, Flags: binary.BigEndian.Uint32(fixed[:]), ExpiresAt: int64(binary.BigEndian.Uint64(fixed[4:]))}
	if rec.ExpiresAt < 0 {
		return Record{}, fmt.Errorf("%w: negative expiry at byte %d", ErrCorrupt, r.off-8)
	}
	vl := binary.BigEndian.Uint32(fixed[12:])
	if vl > MaxValueLen {
		return Record{}, fmt.Errorf("%w: value length %d at byte %d exceeds %d", ErrCorrupt, vl, r.off-4, MaxValueLen)
	}
	// Grown as the bytes come, not to the declared length at once.
	r.val = r.val[:0]
	for remain := int(vl); remain > 0; {
		chunk := min(remain, 1<<20)
		start := len(r.val)
		r.val = grow(r.val, chunk)
		if err := r.full(r.val[start:], "value"); err != nil {
			return Record{}, err
		}
		remain -= chunk
	}
	rec.Value = r.val
	r.items++
	r.bytes += uint64(vl)
	return rec, nil
}

func (r *Reader) trailer() error {
	var b [16]byte
	if err := r.full(b[:], "trailer"); err != nil {
		return err
	}
	want := r.crc.Sum32()
	var c [4]byte
	if err := r.full(c[:], "trailer"); err != nil {
		return err
	}
	r.tr = Trailer{Items: binary.BigEndian.Uint64(b[:]), ValueBytes: binary.BigEndian.Uint64(b[8:]), CRC: binary.BigEndian.Uint32(c[:])}
	if r.tr.CRC != want {
		return fmt.Errorf("%w: stored CRC-32C %08x, computed %08x", ErrChecksum, r.tr.CRC, want)
	}
	if r.tr.Items != r.items || r.tr.ValueBytes != r.bytes {
		return fmt.Errorf("%w: the trailer counts %d items and %d value bytes, the file holds %d and %d",
			ErrCorrupt, r.tr.Items, r.tr.ValueBytes, r.items, r.bytes)
	}
	if _, err := r.br.ReadByte(); err == nil {
		return fmt.Errorf("%w: bytes after the trailer at byte %d", ErrCorrupt, r.off)
	} else if !errors.Is(err, io.EOF) {
		return fmt.Errorf("read snapshot after the trailer: %w", err)
	}
	r.done = true
	return io.EOF
}

// grow extends b by n bytes (their contents undefined).
func grow(b []byte, n int) []byte {
	return slices.Grow(b, n)[:len(b)+n]
}

// Verify reads a whole snapshot and checks it, calling each (if not nil)
// with every record; it returns the header and trailer of a sound file.
func Verify(rd io.Reader, each func(Record) error) (Header, Trailer, error) {
	r, err := NewReader(rd)
	if err != nil {
		return Header{}, Trailer{}, err
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r.Header(), r.Trailer(), nil
		}
		if err != nil {
			return r.Header(), Trailer{}, err
		}
		if each != nil {
			if err := each(rec); err != nil {
				return r.Header(), Trailer{}, err
			}
		}
	}
}
