package binary

import (
	"encoding/binary"
	"io"
	"strconv"

	"github.com/kvd-project/kvd/internal/mcproto"
)

const (
	// readBufSize is the read buffer, memcached's own: a request's header,
	// extras and key must fit in it together, or memcached closes the
	// connection (its buffer fills and never drains).
	readBufSize = 16 << 10
	// retainSize bounds the value buffer kept between requests; a larger
	// one, grown for a big value, is dropped afterwards.
	retainSize = 64 << 10
	// minValueBuf is the first size of a value buffer for a value larger
	// than the read buffer; it then doubles as bytes arrive.
	minValueBuf = 4 << 10
	// maxEmptyReads bounds consecutive (0, nil) reads before giving up.
	maxEmptyReads = 100
)

// Codec is one binary connection's codec: the decoder of its requests
// (Next, Buffered, Phase) and the encoder of their responses (the Append
// methods). Next, Buffered and Phase belong to the connection's reader
// goroutine; the Append methods hold no state and may be called from any
// goroutine.
type Codec struct {
	rd  io.Reader
	lim mcproto.Limits

	buf      []byte // buf[pos:end] is read but not yet decoded; readBufSize once allocated
	pos, end int
	skip     int64 // bytes of a refused body still to discard
	err      error // sticky read error, returned once buffered bytes run out
	closed   error // sticky closing protocol error
	inValue  bool  // Next waits for a value (Phase)

	key  [mcproto.MaxKeyLen]byte // the request's key, copied out of buf
	keys [][]byte                // Request.Keys: key[:n]
	data []byte                  // a value too big for buf
}

// NewCodec returns the codec of a connection whose bytes come from r,
// accepting values up to lim.MaxItemSize (0: the default).
func NewCodec(r io.Reader, lim mcproto.Limits) *Codec {
	return &Codec{rd: r, lim: lim.WithDefaults()}
}

// Open is NewCodec as an mcserver codec constructor.
func Open(r io.Reader, lim mcproto.Limits) (mcproto.Decoder, mcproto.Encoder) {
	c := NewCodec(r, lim)
	return c, c
}

var _ mcproto.Codec = (*Codec)(nil)

// Buffered reports how many bytes are read but not yet decoded, not
// counting bytes of a refused body Next will discard. At 0 the next Next
// reads from the network and may block.
func (c *Codec) Buffered() int {
	n := int64(c.end-c.pos) - c.skip
	if n < 0 {
		return 0
	}
	return int(n)
}

// Phase reports what Next is waiting for: a header (with its extras and
// key), a value, or the rest of a refused body it discards.
func (c *Codec) Phase() mcproto.Phase {
	switch {
	case c.skip > 0:
		return mcproto.PhaseSwallow
	case c.inValue:
		return mcproto.PhaseValue
	}
	return mcproto.PhaseLine
}

// Next decodes the next request into req, overwriting all its fields. Keys
// and Data alias the codec's buffers until the next call; Args are copies.
//
// It returns io.EOF when the stream ends between requests and
// io.ErrUnexpectedEOF when it ends inside one (memcached closes without a
// word either way). A request memcached answers with an error comes back
// as an *mcproto.Error whose Reply is that error response, encoded; Close
// says whether memcached closes the connection after it. After a read
// error or a closing *Error, Next keeps returning that error.
func (c *Codec) Next(req *mcproto.Request) error {
	*req = mcproto.Request{Echo: mcproto.Echo{Proto: mcproto.Binary}}
	if c.closed != nil {
		return c.closed
	}
	if c.skip > 0 {
		if err := c.discard(); err != nil {
			return err
		}
	}
	c.release()

	// The header. memcached closes silently on a bad magic byte.
	if err := c.need(HeaderLen, true); err != nil {
		return err
	}
	h := c.buf[c.pos : c.pos+HeaderLen]
	if h[0] != RequestMagic {
		c.closed = mcproto.CloseError("binary request with magic 0x" + strconv.FormatUint(uint64(h[0]), 16))
		return c.closed
	}
	opcode := h[1]
	keyLen := int(binary.BigEndian.Uint16(h[2:4]))
	extLen := int(h[4])
	bodyLen := int64(binary.BigEndian.Uint32(h[8:12]))
	cas := binary.BigEndian.Uint64(h[16:24])
	info := opcodes[opcode]
	req.Echo = mcproto.Echo{Proto: mcproto.Binary, Op: info.op, Quiet: info.quiet,
		Opcode: opcode, Opaque: binary.BigEndian.Uint32(h[12:16])}
	e := req.Echo

	// memcached reads the extras and the key before it looks at any
	// length; when they cannot fit its read buffer it never gets them and
	// the connection closes.
	head := HeaderLen + extLen + keyLen
	if head > readBufSize {
		c.closed = mcproto.CloseError("binary request header, extras and key of " + strconv.Itoa(head) + " bytes")
		return c.closed
	}
	if err := c.need(head, false); err != nil {
		return err
	}
	ext := c.buf[c.pos+HeaderLen : c.pos+HeaderLen+extLen]
	key := c.buf[c.pos+HeaderLen+extLen : c.pos+head]
	c.pos += head
	rest := bodyLen - int64(extLen) - int64(keyLen) // the value, or what follows the key
	switch {
	case rest < 0:
		return c.fail(e, StatusUnknownCommand, MsgUnknownCommand, true, mcproto.KindError,
			"extras and key longer than the body")
	case keyLen > mcproto.MaxKeyLen:
		return c.fail(e, StatusInvalidArguments, MsgInvalidArguments, true, mcproto.KindClient,
			"key of "+strconv.Itoa(keyLen)+" bytes")
	case info.op == 0:
		// memcached swallows the body and goes on (see the package
		// comment for how kvd's count differs).
		c.skip = rest
		return c.fail(e, StatusUnknownCommand, MsgUnknownCommand, false, mcproto.KindError,
			"unknown opcode 0x"+strconv.FormatUint(uint64(opcode), 16))
	case !info.shape.fits(extLen, keyLen, rest):
		return c.fail(e, StatusInvalidArguments, MsgInvalidArguments, true, mcproto.KindClient,
			"malformed "+info.op.String()+" request")
	}
	req.Op = info.op
	if keyLen > 0 && info.shape != shapeStat {
		c.keys = append(c.keys[:0], c.key[:copy(c.key[:], key)])
		req.Keys = c.keys
	}

	switch info.shape {
	case shapeGet:
	case shapeDelete:
		req.CAS = cas
	case shapeArith:
		req.Delta = binary.BigEndian.Uint64(ext[0:8])
		req.Initial = binary.BigEndian.Uint64(ext[8:16])
		if exp := binary.BigEndian.Uint32(ext[16:20]); exp != 0xffffffff {
			req.Create = true
			req.Exptime = int64(exp)
		}
		req.CAS = cas
	case shapeFlush:
		if extLen == 4 {
			req.HasDelay = true
			req.Delay = int64(binary.BigEndian.Uint32(ext))
		}
	case shapeTouch:
		// What follows the key is not part of the request: memcached
		// reads it as the next one.
		req.Exptime = int64(binary.BigEndian.Uint32(ext))
	case shapeStat:
		// Likewise.
		req.Args = splitArgs(key)
	case shapeStore, shapeConcat, shapeSASLData:
		if info.shape == shapeStore {
			req.Flags = binary.BigEndian.Uint32(ext[0:4])
			req.Exptime = int64(binary.BigEndian.Uint32(ext[4:8]))
			if cas != 0 {
				// memcached turns set, add and replace with a CAS
				// into a compare-and-swap (NREAD_CAS).
				req.Op = mcproto.OpCas
			}
		}
		if info.shape != shapeSASLData {
			req.CAS = cas
		}
		if rest > int64(c.lim.MaxItemSize) {
			c.skip = rest
			if info.shape == shapeSASLData {
				// What memcached without SASL answers to any SASL
				// request; no mechanism kvd offers needs that much.
				return c.fail(e, StatusUnknownCommand, MsgUnknownCommand, false, mcproto.KindError,
					"SASL data of "+strconv.FormatInt(rest, 10)+" bytes")
			}
			if opcode == OpcodeSet || opcode == OpcodeSetQ {
				// memcached decides on the size before it turns a set
				// with a CAS into a cas, so such a set too drops the
				// item it would have replaced: the server deletes for
				// OpSet.
				req.Op = mcproto.OpSet
			}
			req.Echo.Op = req.Op
			err := c.fail(req.Echo, StatusTooLarge, MsgTooLarge, false, mcproto.KindTooLarge,
				"value of "+strconv.FormatInt(rest, 10)+" bytes over the item size limit")
			err.TooLarge = true
			return err
		}
		v, err := c.readValue(int(rest))
		if err != nil {
			*req = mcproto.Request{Echo: mcproto.Echo{Proto: mcproto.Binary}}
			return err
		}
		req.Data = v
	}
	req.Echo.Op = req.Op
	return nil
}

// fits reports whether a body of extLen bytes of extras, keyLen of key and
// rest after them (bodyLen-extLen-keyLen, at least 0) has shape s, as
// memcached 1.6.18 checks it.
func (s shape) fits(extLen, keyLen int, rest int64) bool {
	switch s {
	case shapeNone:
		return extLen == 0 && keyLen == 0 && rest == 0
	case shapeGet, shapeDelete:
		return extLen == 0 && keyLen > 0 && rest == 0
	case shapeStore:
		return extLen == 8 && keyLen > 0
	case shapeConcat, shapeSASLData:
		return extLen == 0 && keyLen > 0
	case shapeArith:
		return extLen == 20 && keyLen > 0 && rest == 0
	case shapeFlush:
		return (extLen == 0 || extLen == 4) && keyLen == 0 && rest == 0
	case shapeStat:
		return extLen == 0
	case shapeTouch:
		return extLen == 4 && keyLen > 0
	}
	return false
}

// fail builds the *mcproto.Error answering a request with echo e by an
// error response; closeConn makes it sticky.
func (c *Codec) fail(e mcproto.Echo, s Status, msg string, closeConn bool, kind mcproto.ErrorKind, reason string) *mcproto.Error {
	err := mcproto.RawError(appendErrorResponse(nil, e, s, msg), closeConn, kind, reason)
	if closeConn {
		c.closed = err
	}
	return err
}

// splitArgs splits a Stat request's key into the words after "stats", as
// memcached's tokenizer splits a text line: on spaces, empty words
// dropped. The words are copies.
func splitArgs(key []byte) []string {
	var args []string
	for i := 0; i < len(key); {
		if key[i] == ' ' {
			i++
			continue
		}
		j := i
		for j < len(key) && key[j] != ' ' {
			j++
		}
		args = append(args, string(key[i:j]))
		i = j
	}
	return args
}

// release drops a value buffer grown past retainSize by an earlier request.
func (c *Codec) release() {
	if cap(c.data) > retainSize {
		c.data = nil
	}
}

// need makes buf[pos:pos+n] hold read bytes, n at most readBufSize. At
// the start of a request (start set) the end of the stream is io.EOF when
// nothing is buffered; anywhere else it is io.ErrUnexpectedEOF.
func (c *Codec) need(n int, start bool) error {
	if c.buf == nil {
		c.buf = make([]byte, readBufSize)
	}
	for c.end-c.pos < n {
		if len(c.buf)-c.pos < n {
			c.end = copy(c.buf, c.buf[c.pos:c.end])
			c.pos = 0
		}
		if err := c.fill(); err != nil {
			if err == io.EOF && (!start || c.end > c.pos) {
				err = io.ErrUnexpectedEOF
				c.err = err
			}
			return err
		}
	}
	return nil
}

// fill reads once into the free space at the end of buf (compacting it
// first when it is full).
func (c *Codec) fill() error {
	if c.err != nil {
		return c.err
	}
	if c.pos == c.end {
		c.pos, c.end = 0, 0
	}
	if c.end == len(c.buf) {
		c.end = copy(c.buf, c.buf[c.pos:c.end])
		c.pos = 0
	}
	for range maxEmptyReads {
		n, err := c.rd.Read(c.buf[c.end:])
		c.end += n
		if err != nil {
			c.err = err
			if n > 0 {
				return nil // decode what came with the error first
			}
			return err
		}
		if n > 0 {
			return nil
		}
	}
	c.err = io.ErrNoProgress
	return c.err
}

// readValue returns the next n bytes and consumes them. The result aliases
// buf when n fits there, c.data otherwise, which grows as the bytes arrive
// rather than to what the header declared.
func (c *Codec) readValue(n int) ([]byte, error) {
	c.inValue = true
	defer func() { c.inValue = false }()
	if n <= len(c.buf) {
		if err := c.need(n, false); err != nil {
			return nil, err
		}
		v := c.buf[c.pos : c.pos+n : c.pos+n]
		c.pos += n
		return v, nil
	}
	d := c.data[:0]
	if cap(d) == 0 {
		d = make([]byte, 0, min(n, max(minValueBuf, c.end-c.pos)))
	}
	for len(d) < n {
		if len(d) == cap(d) {
			d = growTo(d, n)
		}
		if c.pos < c.end {
			k := copy(d[len(d):min(cap(d), n)], c.buf[c.pos:c.end])
			d = d[:len(d)+k]
			c.pos += k
			continue
		}
		if c.err != nil {
			c.data = d[:0]
			if c.err == io.EOF {
				c.err = io.ErrUnexpectedEOF
			}
			return nil, c.err
		}
		// Straight into d: the value bypasses buf.
		k, err := readSome(c.rd, d[len(d):min(cap(d), n)])
		d = d[:len(d)+k]
		if err != nil {
			c.err = err
		}
	}
	c.data = d[:0]
	return d, nil
}

// readSome reads into p, retrying empty reads up to maxEmptyReads times.
func readSome(r io.Reader, p []byte) (int, error) {
	for range maxEmptyReads {
		n, err := r.Read(p)
		if n > 0 || err != nil {
			return n, err
		}
	}
	return 0, io.ErrNoProgress
}

// growTo returns d with more capacity: double, at most n.
func growTo(d []byte, n int) []byte {
	nd := make([]byte, len(d), min(max(2*cap(d), minValueBuf), n))
	copy(nd, d)
	return nd
}

// discard drops the rest of a refused body as it streams by.
func (c *Codec) discard() error {
	for c.skip > 0 {
		if c.pos == c.end {
			if err := c.fill(); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
					c.err = err
				}
				return err
			}
		}
		k := min(int64(c.end-c.pos), c.skip)
		c.pos += int(k)
		c.skip -= k
	}
	return nil
}
