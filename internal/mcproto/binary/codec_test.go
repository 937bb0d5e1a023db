package binary

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// A binary-protocol request gets that protocol's "not supported" answer,
// echoing its opcode and opaque, and the connection closes; a header cut
// short closes without a word.
func TestRequestIsRefused(t *testing.T) {
	hdr := []byte{0x80, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 3, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, tc := range []struct {
		name string
		rd   io.Reader
	}{
		{"whole", bytes.NewReader(append(append([]byte(nil), hdr...), "foo"...))},
		{"header split across reads", iotest.OneByteReader(bytes.NewReader(hdr))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req mcproto.Request
			c := NewCodec(tc.rd, mcproto.Limits{})
			err := c.Next(&req)
			var pe *mcproto.Error
			require.ErrorAs(t, err, &pe)
			require.True(t, pe.Close)
			raw := pe.Reply
			require.GreaterOrEqual(t, len(raw), HeaderLen)
			assert.Equal(t, byte(0x81), raw[0], "response magic")
			assert.Equal(t, hdr[1], raw[1], "opcode echoed")
			assert.Equal(t, uint16(0x0083), binary.BigEndian.Uint16(raw[6:8]), "status: not supported")
			assert.Equal(t, hdr[12:16], raw[12:16], "opaque echoed")
			body := raw[HeaderLen:]
			assert.Equal(t, uint32(len(body)), binary.BigEndian.Uint32(raw[8:12]), "total body length")
			assert.Contains(t, string(body), "text protocol")
			assert.Equal(t, err, c.Next(&req), "the closing error is sticky")
		})
	}

	var req mcproto.Request
	err := NewCodec(bytes.NewReader(hdr[:10]), mcproto.Limits{}).Next(&req)
	var pe *mcproto.Error
	require.ErrorAs(t, err, &pe)
	assert.True(t, pe.Close)
	assert.Empty(t, pe.Reply)
}
