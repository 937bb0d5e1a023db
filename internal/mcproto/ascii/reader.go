package ascii

import (
	"bytes"
	"errors"
	"github.com/kvd-project/kvd/internal/mcproto"
	"io"
	"strconv"
	"unsafe"
)

const (
	// initialBufSize is the read buffer of a fresh Reader, memcached's own
	// read-buffer size: enough for many pipelined small requests per read.
	initialBufSize = 16 << 10
	// retainSize bounds the buffers a Reader keeps between requests; a
	// larger one, grown for a big multiget or value, is dropped afterwards.
	retainSize = 64 << 10
	// maxEmptyReads bounds consecutive (0, nil) reads before giving up.
	maxEmptyReads = 100
	// maxTokens mirrors memcached's tokenizer, which splits at most 23 words
	// before handing back the rest of the line (it matters only for where
	// the HTTP check looks).
	maxTokens = 23
)

// Reader parses memcached text-protocol requests from a byte stream.
//
// Its buffers are bounded: the read buffer grows only to hold a line within
// Limits, a value within MaxItemSize is read into a buffer that grows with
// the bytes actually received, and a rejected value is discarded while it
// streams by. In the steady state with small requests Next does not
// allocate.
//
// Deliberate differences from memcached 1.6.18:
//   - The admin commands slabs, lru, lru_crawler, watch and cache_memlimit
//     answer ERROR; shutdown answers what memcached started without -A
//     does. (The meta commands' differences are in the package doc.)
//   - The line bound is deterministic: memcached closes only when 2048
//     bytes without '\n' happen to be in its buffer, so a longer line that
//     arrives in one read may pass there; here any line over MaxLine closes.
//   - gat/gats lines get the multiget bound like get/gets (memcached grants
//     it to get/gets only), and multiget lines are bounded by
//     MaxMultigetLine (memcached's are unbounded).
//   - All keys of a multiget are checked before any is looked up; memcached
//     looks up (and for gat, touches) the keys before an over-long one, then
//     discards those results and answers the same CLIENT_ERROR.
type Reader struct {
	rd  io.Reader
	lim mcproto.Limits

	buf      []byte // buf[pos:end] is read but not yet parsed
	pos, end int
	skip     int64 // bytes of a rejected value still to discard
	err      error // sticky read error, returned once buffered bytes run out
	closed   error // sticky closing protocol error
	// inValue is set while readBlock waits for a data block (Phase).
	inValue bool

	words [][]byte                // tokens of the current line, alias buf
	key   [mcproto.MaxKeyLen]byte // the key of a storage command, copied out of buf
	keys  [][]byte                // Request.Keys for storage commands
	data  []byte                  // a value too big for buf
}

// NewReader returns a Reader that parses requests from r within lim.
func NewReader(r io.Reader, lim mcproto.Limits) *Reader {
	return &Reader{rd: r, lim: lim.WithDefaults()}
}

// Buffered reports how many bytes have been read from the underlying reader
// but not yet parsed. When it returns 0 the next call to Next reads from the
// network and may block, so a server flushes its pending replies first: one
// flush per pipelined batch. Bytes of a rejected value that Next will
// discard are not counted.
func (r *Reader) Buffered() int {
	n := int64(r.end-r.pos) - r.skip
	if n < 0 {
		return 0
	}
	return int(n)
}

// Phase reports what the Reader is in the middle of reading. A server calls
// it from the underlying reader's Read, that is while Next waits for bytes,
// to show the connection's state (memcached's conn_read, conn_nread and
// conn_swallow in `stats conns`).
func (r *Reader) Phase() mcproto.Phase {
	switch {
	case r.skip > 0:
		return mcproto.PhaseSwallow
	case r.inValue:
		return mcproto.PhaseValue
	}
	return mcproto.PhaseLine
}

// Next parses the next request into req, overwriting all its fields. Keys
// and Data alias internal buffers and stay valid only until the next call.
//
// It returns io.EOF when the stream ends between requests and
// io.ErrUnexpectedEOF when it ends inside one; other read errors come back
// as they are, after the requests already buffered. A protocol error comes
// back as an *Error, which says what to answer and whether to close. After a
// read error or a closing *Error, Next keeps returning that error.
func (r *Reader) Next(req *mcproto.Request) error {
	*req = mcproto.Request{}
	if r.closed != nil {
		return r.closed
	}
	if r.skip > 0 {
		if err := r.discard(); err != nil {
			return err
		}
	}
	r.release()
	line, err := r.readLine()
	if err != nil {
		return err
	}
	err = r.parse(line, req)
	req.Echo.Op = req.Op
	return err
}

// release drops buffers grown past retainSize by an earlier request.
func (r *Reader) release() {
	if cap(r.data) > retainSize {
		r.data = nil
	}
	// A multiget of short keys grows the token slice to a few hundred
	// thousand entries, 24 bytes each.
	if cap(r.words)*int(unsafe.Sizeof([]byte(nil))) > retainSize {
		r.words = nil
	}
	if len(r.buf) > retainSize && r.end-r.pos <= initialBufSize {
		b := make([]byte, initialBufSize)
		r.end = copy(b, r.buf[r.pos:r.end])
		r.pos = 0
		r.buf = b
	}
}

// maxBuf is the most the read buffer ever grows to: the longest line, its
// "\r\n" and one byte, so that a full buffer without '\n' always holds a
// line over the limit.
func (r *Reader) maxBuf() int {
	return r.lim.MaxMultigetLine + 3
}

// fill reads once from the underlying reader into free space at the end of
// buf, compacting or growing buf first if it is full.
func (r *Reader) fill() error {
	if r.err != nil {
		return r.err
	}
	if r.buf == nil {
		r.buf = make([]byte, min(initialBufSize, r.maxBuf()))
	}
	if r.pos == r.end {
		r.pos, r.end = 0, 0
	}
	if r.end == len(r.buf) {
		if r.pos > 0 {
			r.end = copy(r.buf, r.buf[r.pos:r.end])
			r.pos = 0
		} else {
			n := min(2*len(r.buf), r.maxBuf())
			if n <= len(r.buf) {
				// Unreachable: callers check the line bound first.
				return errors.New("ascii: read buffer full")
			}
			b := make([]byte, n)
			r.end = copy(b, r.buf[:r.end])
			r.buf = b
		}
	}
	for range maxEmptyReads {
		n, err := r.rd.Read(r.buf[r.end:])
		r.end += n
		if err != nil {
			r.err = err
			if n > 0 {
				return nil // parse what came with the error first
			}
			return err
		}
		if n > 0 {
			return nil
		}
	}
	r.err = io.ErrNoProgress
	return r.err
}

// unexpected turns io.EOF in the middle of a request into
// io.ErrUnexpectedEOF and keeps it sticky.
func (r *Reader) unexpected(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
		r.err = err
	}
	return err
}

// readLine returns the next line without its '\n' and consumes it.
//
// A line's length is counted without its "\r\n" (or "\n"), so the bound
// does not depend on how the bytes arrive: while no '\n' has come, the
// buffered bytes may exceed the bound by one, the '\r'.
func (r *Reader) readLine() ([]byte, error) {
	scanned := 0
	for {
		if i := bytes.IndexByte(r.buf[r.pos+scanned:r.end], '\n'); i >= 0 {
			n := scanned + i
			line := r.buf[r.pos : r.pos+n]
			if content := len(bytes.TrimSuffix(line, []byte{'\r'})); content > r.lim.MaxLine {
				if err := r.checkLong(line, content, true); err != nil {
					return nil, err
				}
			}
			r.pos += n + 1
			return line, nil
		}
		scanned = r.end - r.pos
		if scanned > r.lim.MaxLine+1 {
			if err := r.checkLong(r.buf[r.pos:r.end], scanned-1, false); err != nil {
				return nil, err
			}
		}
		if err := r.fill(); err != nil {
			if r.end > r.pos {
				return nil, r.unexpected(err)
			}
			return nil, err
		}
	}
}

// checkLong decides about a line (or its beginning b, when complete is
// false) whose length is over MaxLine: get/gets/gat/gats lines may reach
// MaxMultigetLine; any other line closes the connection silently, as in
// memcached. When b is too short to tell, it waits for more bytes.
func (r *Reader) checkLong(b []byte, length int, complete bool) error {
	if length > r.lim.MaxMultigetLine {
		r.closed = mcproto.CloseError("request line longer than " + strconv.Itoa(r.lim.MaxMultigetLine) + " bytes")
		return r.closed
	}
	switch multigetPrefix(b) {
	case yes:
		return nil
	case maybe:
		if !complete {
			return nil
		}
	}
	r.closed = mcproto.CloseError("request line longer than " + strconv.Itoa(r.lim.MaxLine) + " bytes")
	return r.closed
}

type tristate uint8

const (
	no tristate = iota
	yes
	maybe // b is too short to tell
)

// multigetPrefix tells whether a line starts, after at most 100 spaces, with
// "get ", "gets ", "gat " or "gats " (memcached's test, widened to gat).
func multigetPrefix(b []byte) tristate {
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	if i > 100 {
		return no
	}
	b = b[i:]
	if len(b) == 0 {
		return maybe
	}
	res := no
	for _, p := range [...]string{"get ", "gets ", "gat ", "gats "} {
		switch {
		case len(b) >= len(p) && string(b[:len(p)]) == p:
			return yes
		case len(b) < len(p) && string(b) == p[:len(b)]:
			res = maybe
		}
	}
	return res
}

// readBlock returns the next n bytes and consumes them. The result aliases
// buf when it fits there, r.data otherwise.
func (r *Reader) readBlock(n int) ([]byte, error) {
	r.inValue = true
	defer func() { r.inValue = false }()
	if n <= len(r.buf) || r.end-r.pos >= n {
		if r.end-r.pos < n && r.pos > 0 && len(r.buf)-r.pos < n {
			r.end = copy(r.buf, r.buf[r.pos:r.end])
			r.pos = 0
		}
		for r.end-r.pos < n {
			if err := r.fill(); err != nil {
				return nil, r.unexpected(err)
			}
		}
		b := r.buf[r.pos : r.pos+n]
		r.pos += n
		return b, nil
	}
	// Too big for buf: take what is buffered, then read the rest straight
	// into r.data, growing it as bytes arrive rather than by what the
	// client declared.
	d := r.data[:0]
	if cap(d) == 0 {
		d = make([]byte, 0, min(n, retainSize))
	}
	for r.pos < r.end && len(d) < n {
		if len(d) == cap(d) {
			d = growTo(d, n)
		}
		k := copy(d[len(d):min(cap(d), n)], r.buf[r.pos:r.end])
		d = d[:len(d)+k]
		r.pos += k
	}
	for empty := 0; len(d) < n; {
		if r.err != nil {
			r.data = d[:0]
			return nil, r.unexpected(r.err)
		}
		if len(d) == cap(d) {
			d = growTo(d, n)
		}
		k, err := r.rd.Read(d[len(d):min(cap(d), n)])
		d = d[:len(d)+k]
		switch {
		case err != nil:
			r.err = err
		case k > 0:
			empty = 0
		default:
			if empty++; empty >= maxEmptyReads {
				r.err = io.ErrNoProgress
			}
		}
	}
	r.data = d[:0]
	return d, nil
}

// growTo returns d with more capacity: double, at most n.
func growTo(d []byte, n int) []byte {
	c := min(max(2*cap(d), 4096), n)
	nd := make([]byte, len(d), c)
	copy(nd, d)
	return nd
}

// discard drops the rest of a rejected value.
func (r *Reader) discard() error {
	for r.skip > 0 {
		if r.pos == r.end {
			if err := r.fill(); err != nil {
				return r.unexpected(err)
			}
		}
		k := min(int64(r.end-r.pos), r.skip)
		r.pos += int(k)
		r.skip -= k
	}
	return nil
}
