package mcproto

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"unsafe"
)

// MaxKeyLen is the longest key memcached accepts, in bytes.
const MaxKeyLen = 250

// Defaults applied by NewReader to Limits fields left at zero.
const (
	DefaultMaxItemSize     = 1 << 20 // memcached's -I default
	DefaultMaxLine         = 2048    // memcached's bound on a line without '\n'
	DefaultMaxMultigetLine = 1 << 20
)

// Limits bounds what a Reader accepts and therefore the memory it holds. A
// zero field takes its default.
type Limits struct {
	// MaxItemSize is the largest value, in bytes, a storage command may
	// carry. A larger one is swallowed without being buffered and answered
	// SERVER_ERROR object too large for cache. Default 1 MiB.
	MaxItemSize int
	// MaxLine is the longest request line, in bytes before the '\n', other
	// than get/gets/gat/gats lines. A longer line closes the connection
	// without a reply, as in memcached. Default 2048.
	MaxLine int
	// MaxMultigetLine is the longest get/gets/gat/gats line. A longer one
	// closes the connection without a reply. Default 1 MiB; never less than
	// MaxLine.
	MaxMultigetLine int
}

// DefaultLimits returns the limits NewReader uses for zero fields.
func DefaultLimits() Limits {
	return Limits{
		MaxItemSize:     DefaultMaxItemSize,
		MaxLine:         DefaultMaxLine,
		MaxMultigetLine: DefaultMaxMultigetLine,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxItemSize <= 0 {
		l.MaxItemSize = d.MaxItemSize
	}
	if l.MaxLine <= 0 {
		l.MaxLine = d.MaxLine
	}
	if l.MaxMultigetLine <= 0 {
		l.MaxMultigetLine = d.MaxMultigetLine
	}
	if l.MaxMultigetLine < l.MaxLine {
		l.MaxMultigetLine = l.MaxLine
	}
	return l
}

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
//   - Meta commands (mg, ms, md, ma, mn, me) and the admin commands slabs,
//     lru, lru_crawler, watch and cache_memlimit answer ERROR; shutdown
//     answers what memcached started without -A does.
//   - The line bound is deterministic: memcached closes only when 2048
//     bytes without '\n' happen to be in its buffer, so a longer line that
//     arrives in one read may pass there; here any line over MaxLine closes.
//   - gat/gats lines get the multiget bound like get/gets (memcached grants
//     it to get/gets only), and multiget lines are bounded by
//     MaxMultigetLine (memcached's are unbounded).
//   - A request in the binary protocol (a connection whose first byte is
//     0x80) is answered with that protocol's "not supported" response and
//     the connection closes;
//     memcached started without the binary protocol (-B ascii) reads it as
//     the start of a text line and waits for the line's end.
//   - All keys of a multiget are checked before any is looked up; memcached
//     looks up (and for gat, touches) the keys before an over-long one, then
//     discards those results and answers the same CLIENT_ERROR.
type Reader struct {
	rd  io.Reader
	lim Limits

	buf      []byte // buf[pos:end] is read but not yet parsed
	pos, end int
	skip     int64 // bytes of a rejected value still to discard
	err      error // sticky read error, returned once buffered bytes run out
	closed   error // sticky closing protocol error
	// text is set once a line has been read: from then on the connection
	// speaks the text protocol, and a line starting with 0x80 is text.
	text bool

	// inValue is set while readBlock waits for a data block (Phase).
	inValue bool

	words [][]byte        // tokens of the current line, alias buf
	key   [MaxKeyLen]byte // the key of a storage command, copied out of buf
	keys  [][]byte        // Request.Keys for storage commands
	data  []byte          // a value too big for buf
}

// NewReader returns a Reader that parses requests from r within lim.
func NewReader(r io.Reader, lim Limits) *Reader {
	return &Reader{rd: r, lim: lim.withDefaults()}
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

// Phase is what a Reader is reading.
type Phase uint8

const (
	// PhaseLine: a request line, or nothing yet.
	PhaseLine Phase = iota
	// PhaseValue: the data block of a storage command.
	PhaseValue
	// PhaseSwallow: the rest of a data block rejected as too large, which
	// is discarded.
	PhaseSwallow
)

// Phase reports what the Reader is in the middle of reading. A server calls
// it from the underlying reader's Read, that is while Next waits for bytes,
// to show the connection's state (memcached's conn_read, conn_nread and
// conn_swallow in `stats conns`).
func (r *Reader) Phase() Phase {
	switch {
	case r.skip > 0:
		return PhaseSwallow
	case r.inValue:
		return PhaseValue
	}
	return PhaseLine
}

// Next parses the next request into req, overwriting all its fields. Keys
// and Data alias internal buffers and stay valid only until the next call.
//
// It returns io.EOF when the stream ends between requests and
// io.ErrUnexpectedEOF when it ends inside one; other read errors come back
// as they are, after the requests already buffered. A protocol error comes
// back as an *Error, which says what to answer and whether to close. After a
// read error or a closing *Error, Next keeps returning that error.
func (r *Reader) Next(req *Request) error {
	*req = Request{}
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
	return r.parse(line, req)
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
				return errors.New("mcproto: read buffer full")
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
		if !r.text && scanned == 0 && r.end > r.pos && r.buf[r.pos] == binaryRequestMagic {
			return nil, r.binaryRequest()
		}
		if i := bytes.IndexByte(r.buf[r.pos+scanned:r.end], '\n'); i >= 0 {
			n := scanned + i
			line := r.buf[r.pos : r.pos+n]
			if content := len(bytes.TrimSuffix(line, []byte{'\r'})); content > r.lim.MaxLine {
				if err := r.checkLong(line, content, true); err != nil {
					return nil, err
				}
			}
			r.pos += n + 1
			r.text = true
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

// binaryRequest refuses a request in memcached's binary protocol, which no
// text command can be mistaken for (none starts with the byte 0x80). A
// binary client sends a header with no line end in it and waits: read as a
// text line, it would wait for an answer until its own timeout. It gets the
// binary "not supported" response instead, and the connection closes,
// because without parsing the header its body cannot be skipped.
//
// Only a connection's first byte is looked at, as memcached picks the
// protocol of a connection once, from its first byte: a later line that
// starts with 0x80 is a text line, answered ERROR.
func (r *Reader) binaryRequest() error {
	for r.end-r.pos < BinaryHeaderLen {
		if err := r.fill(); err != nil {
			r.closed = closeError("binary-protocol request cut short")
			return r.closed
		}
	}
	hdr := r.buf[r.pos : r.pos+BinaryHeaderLen]
	r.closed = &Error{Raw: AppendBinaryNotSupported(nil, hdr), Close: true, reason: "binary-protocol request"}
	return r.closed
}

// checkLong decides about a line (or its beginning b, when complete is
// false) whose length is over MaxLine: get/gets/gat/gats lines may reach
// MaxMultigetLine; any other line closes the connection silently, as in
// memcached. When b is too short to tell, it waits for more bytes.
func (r *Reader) checkLong(b []byte, length int, complete bool) error {
	if length > r.lim.MaxMultigetLine {
		r.closed = closeError("request line longer than " + strconv.Itoa(r.lim.MaxMultigetLine) + " bytes")
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
	r.closed = closeError("request line longer than " + strconv.Itoa(r.lim.MaxLine) + " bytes")
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
