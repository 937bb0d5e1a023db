package binary

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// appendRequest encodes req as the packet it was decoded from, from the
// Request's fields alone (and the opcode and opaque its Echo keeps).
func appendRequest(dst []byte, req *mcproto.Request) []byte {
	var ext, key string
	if len(req.Keys) == 1 {
		key = string(req.Keys[0])
	}
	switch req.Op {
	case mcproto.OpSet, mcproto.OpAdd, mcproto.OpReplace, mcproto.OpCas:
		ext = be32(req.Flags) + be32(uint32(req.Exptime))
	case mcproto.OpIncr, mcproto.OpDecr:
		exp := uint32(0xffffffff)
		if req.Create {
			exp = uint32(req.Exptime)
		}
		ext = be64(req.Delta) + be64(req.Initial) + be32(exp)
	case mcproto.OpTouch, mcproto.OpGat:
		ext = be32(uint32(req.Exptime))
	case mcproto.OpFlushAll:
		if req.HasDelay {
			ext = be32(uint32(req.Delay))
		}
	case mcproto.OpStats:
		key = strings.Join(req.Args, " ")
	}
	return append(dst, pkt(req.Echo.Opcode, key, ext, string(req.Data), req.CAS, req.Echo.Opaque)...)
}

// Every request decodeTests decodes re-encodes to the bytes it came from,
// and its response repeats its opcode and opaque.
func TestRoundTrip(t *testing.T) {
	n := 0
	for _, tt := range decodeTests {
		c := NewCodec(bytes.NewReader(tt.in), mcproto.Limits{})
		var req mcproto.Request
		if c.Next(&req) != nil || len(tt.in) == 0 {
			continue
		}
		consumed := len(tt.in) - c.Buffered()
		if req.Op == mcproto.OpStats || req.Op == mcproto.OpTouch || req.Op == mcproto.OpGat {
			if hdrBody(tt.in) != consumed-HeaderLen {
				continue // a body longer than extras and key: the rest is the next request
			}
		}
		if tt.name == "data type and vbucket ignored" || tt.name == "stat group" || tt.name == "get" {
			continue // fields the Request does not keep (a get's CAS, the data type, spaces)
		}
		n++
		assert.Equal(t, tt.in[:consumed], appendRequest(nil, &req), tt.name)
		resp, err := parseResponse(enc.AppendError(nil, req.Echo, mcproto.KindServer, "x"))
		require.NoError(t, err)
		assert.Equal(t, tt.in[1], resp.opcode, tt.name)
		assert.Equal(t, req.Echo.Opaque, resp.opaque, tt.name)
	}
	assert.Greater(t, n, 35)
}

func hdrBody(p []byte) int {
	return int(p[8])<<24 | int(p[9])<<16 | int(p[10])<<8 | int(p[11])
}
