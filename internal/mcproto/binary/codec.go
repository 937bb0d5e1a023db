// Package binary is kvd's codec for memcached's binary protocol: a
// connection whose first byte is 0x80 (mcproto.BinaryMagic) speaks it.
//
// kvd does not serve the binary protocol yet. Until it does, the codec
// reads the first request's 24-byte header and answers it with the
// protocol's own "not supported" status, echoing the opcode and opaque, so
// that a binary-only client fails at once with a reason rather than wait
// for a text reply that never comes; then the connection closes, because
// without decoding the header's lengths its body cannot be skipped.
//
// It is pure: no network, no storage, and of kvd it imports only mcproto.
package binary

import (
	"encoding/binary"
	"io"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// HeaderLen is the length of every request and response header.
const HeaderLen = 24

const (
	// responseMagic starts every response.
	responseMagic = 0x81
	// statusNotSupported is the protocol's status 0x0083.
	statusNotSupported = 0x0083
	notSupportedMsg    = "binary protocol not supported by kvd: use the text protocol"
)

// Codec reads a binary connection's requests.
type Codec struct {
	r      io.Reader
	closed error
}

// NewCodec returns the codec of a connection whose bytes come from r.
func NewCodec(r io.Reader, _ mcproto.Limits) *Codec {
	return &Codec{r: r}
}

var _ mcproto.Decoder = (*Codec)(nil)

// Next reads the first request's header and refuses it (see the package
// comment); it returns the same closing error from then on.
func (c *Codec) Next(req *mcproto.Request) error {
	*req = mcproto.Request{Echo: mcproto.Echo{Proto: mcproto.Binary}}
	if c.closed != nil {
		return c.closed
	}
	var hdr [HeaderLen]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		c.closed = mcproto.CloseError("binary-protocol request cut short")
		return c.closed
	}
	c.closed = mcproto.RawError(AppendNotSupported(nil, hdr[:]), true, mcproto.KindError, "binary-protocol request")
	return c.closed
}

// Buffered is 0: the codec reads nothing ahead.
func (c *Codec) Buffered() int { return 0 }

// Phase is always a header: the codec reads nothing else.
func (c *Codec) Phase() mcproto.Phase { return mcproto.PhaseLine }

// AppendNotSupported appends the response refusing the request whose header
// is hdr (at least HeaderLen bytes): status "not supported", the request's
// opcode and opaque, and a short explanation as the value.
func AppendNotSupported(dst, hdr []byte) []byte {
	var h [HeaderLen]byte
	h[0] = responseMagic
	h[1] = hdr[1]
	binary.BigEndian.PutUint16(h[6:8], statusNotSupported)
	binary.BigEndian.PutUint32(h[8:12], uint32(len(notSupportedMsg)))
	copy(h[12:16], hdr[12:16])
	dst = append(dst, h[:]...)
	return append(dst, notSupportedMsg...)
}

// Open is NewCodec as an mcserver codec constructor. The codec answers its
// first request itself (Next returns the closing refusal), so no reply is
// ever rendered on a binary connection and there is no encoder yet.
func Open(r io.Reader, lim mcproto.Limits) (mcproto.Decoder, mcproto.Encoder) {
	return NewCodec(r, lim), nil
}
