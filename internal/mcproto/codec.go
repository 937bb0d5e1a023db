package mcproto

import (
	"errors"
	"io"
)

// Decoder reads requests from one connection. A connection has one, used by
// its reader goroutine only.
type Decoder interface {
	// Next decodes the next request into req, overwriting all its fields.
	// It returns io.EOF when the stream ends between requests; a protocol
	// error comes back as an *Error, which says what to answer and whether
	// to close.
	Next(req *Request) error
	// Buffered reports how many bytes are read but not yet decoded: at 0
	// the next Next may block, so the server flushes its replies first.
	Buffered() int
	// Phase reports what the decoder is in the middle of reading; the
	// server calls it while Next waits for bytes.
	Phase() Phase
}

// Encoder renders results in one protocol. Each method appends to dst and
// returns it, and appends nothing where the request's protocol answers
// nothing (noreply, a quiet request's success). Methods may be called from
// any goroutine: an Encoder holds no state.
type Encoder interface {
	// AppendHit appends one hit of a retrieval: key, flags, value and,
	// for gets and gats, the CAS token. A touch that found its item is a
	// hit too (value nil): the binary protocol answers its flags and CAS.
	AppendHit(dst []byte, e Echo, key []byte, flags uint32, value []byte, cas uint64) []byte
	// AppendMiss appends what a retrieval answers for a key it did not
	// find (nothing in the text protocol).
	AppendMiss(dst []byte, e Echo, key []byte) []byte
	// AppendEnd ends a retrieval or a stats reply.
	AppendEnd(dst []byte, e Echo) []byte
	// AppendStatus appends a reply that is only an outcome; cas is the
	// item's CAS token after the request, 0 when there is none (the
	// binary protocol returns it for stores, deletes and touches).
	AppendStatus(dst []byte, e Echo, s Status, cas uint64) []byte
	// AppendNumber appends the new value of incr or decr, and the item's
	// CAS token after it.
	AppendNumber(dst []byte, e Echo, v, cas uint64) []byte
	// AppendVersion appends the server's version.
	AppendVersion(dst []byte, e Echo, version string) []byte
	// AppendStat appends one statistic of a stats reply.
	AppendStat(dst []byte, e Echo, name, value string) []byte
	// AppendStatUint appends one numeric statistic.
	AppendStatUint(dst []byte, e Echo, name string, v uint64) []byte
	// AppendError appends an error of kind with msg, the protocol-neutral
	// explanation (the text protocol's words after SERVER_ERROR or
	// CLIENT_ERROR; ignored by kinds whose words are fixed).
	AppendError(dst []byte, e Echo, kind ErrorKind, msg string) []byte
}

// SASLEncoder renders the successes of the binary protocol's SASL
// exchange, whose bodies no other reply has: the mechanisms a server
// offers, and the word it answers a successful authentication with. The
// binary codec implements it; a session asserts its Encoder to it.
type SASLEncoder interface {
	// AppendSASL appends a success response to the SASL request e
	// echoes, body as its value.
	AppendSASL(dst []byte, e Echo, body string) []byte
}

// Codec is one connection's protocol: how its requests are read and its
// replies written.
type Codec interface {
	Decoder
	Encoder
}

// Status is an outcome whose reply carries nothing else.
type Status uint8

const (
	StatusStored Status = iota + 1
	StatusNotStored
	StatusExists
	StatusNotFound
	StatusDeleted
	StatusTouched
	StatusOK
	// StatusReset answers "stats reset".
	StatusReset
	// StatusNoop answers OpNoop.
	StatusNoop
	// StatusQuit answers OpQuit before the connection closes (nothing in
	// the text protocol, whose quit closes without a word).
	StatusQuit
)

// Phase is what a Decoder is reading.
type Phase uint8

const (
	// PhaseLine: a request line or header, or nothing yet.
	PhaseLine Phase = iota
	// PhaseValue: the value of a storage request.
	PhaseValue
	// PhaseSwallow: the rest of a value rejected as too large, which is
	// discarded.
	PhaseSwallow
)

// MaxKeyLen is the longest key memcached accepts, in bytes.
const MaxKeyLen = 250

// Defaults applied to Limits fields left at zero.
const (
	DefaultMaxItemSize     = 1 << 20 // memcached's -I default
	DefaultMaxLine         = 2048    // memcached's bound on a line without '\n'
	DefaultMaxMultigetLine = 1 << 20
)

// Limits bounds what a codec accepts and therefore the memory it holds. A
// zero field takes its default.
type Limits struct {
	// MaxItemSize is the largest value, in bytes, a storage request may
	// carry. A larger one is swallowed without being buffered and
	// answered as too large. Default 1 MiB.
	MaxItemSize int
	// MaxLine is the longest text request line, in bytes before the '\n',
	// other than get/gets/gat/gats lines. A longer line closes the
	// connection without a reply, as in memcached. Default 2048.
	MaxLine int
	// MaxMultigetLine is the longest get/gets/gat/gats line. A longer one
	// closes the connection without a reply. Default 1 MiB; never less
	// than MaxLine.
	MaxMultigetLine int
}

// DefaultLimits returns the limits codecs use for zero fields.
func DefaultLimits() Limits {
	return Limits{
		MaxItemSize:     DefaultMaxItemSize,
		MaxLine:         DefaultMaxLine,
		MaxMultigetLine: DefaultMaxMultigetLine,
	}
}

// WithDefaults returns l with every zero field at its default.
func (l Limits) WithDefaults() Limits {
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

// BinaryMagic is the first byte of every request in memcached's binary
// protocol. No text or meta command starts with it, so a connection's
// first byte tells its protocol, as memcached decides it (try_read_command
// in memcached.c): 0x80 binary, anything else text and meta.
const BinaryMagic = 0x80

// tlsHandshake opens every TLS connection (a handshake record). No text
// command starts with that control character, so a connection that opens
// with it is a TLS client on a plaintext port.
const tlsHandshake = 0x16

// ErrTLSOnPlaintext is a TLS client on a port that does not speak TLS:
// answering it in text would only confuse it, so the connection is closed.
var ErrTLSOnPlaintext = errors.New("a TLS client on a plaintext port (is the client's TLS on where the server's is off?)")

// Sniff reads a connection's first bytes from r and reports whether the
// connection speaks the binary protocol. The returned reader yields the
// bytes Sniff read, then the rest of r: the codec reads from it. An error
// is the read error that came before any byte.
func Sniff(r io.Reader) (binary bool, rest io.Reader, err error) {
	buf := make([]byte, 4<<10)
	for empty := 0; ; {
		n, err := r.Read(buf)
		if n > 0 {
			if buf[0] == tlsHandshake {
				return false, nil, ErrTLSOnPlaintext
			}
			return buf[0] == BinaryMagic, &prefixReader{p: buf[:n], r: r, err: err}, nil
		}
		if err != nil {
			return false, nil, err
		}
		if empty++; empty >= 100 {
			return false, nil, io.ErrNoProgress
		}
	}
}

// prefixReader yields p, then what r yields. err is an error r returned
// with p, handed on once p is read.
type prefixReader struct {
	p   []byte
	r   io.Reader
	err error
}

func (pr *prefixReader) Read(b []byte) (int, error) {
	if len(pr.p) > 0 {
		n := copy(b, pr.p)
		pr.p = pr.p[n:]
		if len(pr.p) == 0 {
			pr.p = nil // let the first read's buffer go
		}
		return n, nil
	}
	if pr.err != nil {
		return 0, pr.err
	}
	return pr.r.Read(b)
}
