package binary_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kvd-project/kvd/internal/mcproto"
	mcbinary "github.com/kvd-project/kvd/internal/mcproto/binary"
)

// request builds a binary request: header, extras, key, value.
func request(opcode uint8, opaque uint32, extras, key, value string) []byte {
	h := make([]byte, mcbinary.HeaderLen)
	h[0], h[1], h[4] = mcbinary.RequestMagic, opcode, uint8(len(extras))
	binary.BigEndian.PutUint16(h[2:4], uint16(len(key)))
	binary.BigEndian.PutUint32(h[8:12], uint32(len(extras)+len(key)+len(value)))
	binary.BigEndian.PutUint32(h[12:16], opaque)
	return append(h, extras+key+value...)
}

// A connection loop in miniature: decode, answer through the codec's
// encoder, write protocol errors as told. The quiet GetKQ of a missing key
// answers nothing; the Noop ends the batch.
func Example() {
	var in bytes.Buffer
	in.Write(request(mcbinary.OpcodeSetQ, 1, "\x00\x00\x00\x2a\x00\x00\x00\x00", "greeting", "hello"))
	in.Write(request(mcbinary.OpcodeGetKQ, 2, "", "greeting", ""))
	in.Write(request(mcbinary.OpcodeGetKQ, 3, "", "nothing", ""))
	in.Write(request(0x1b, 4, "\x00\x00\x00\x01", "", "")) // Verbosity: unknown to memcached 1.6.18
	in.Write(request(mcbinary.OpcodeNoop, 5, "", "", ""))

	c := mcbinary.NewCodec(&in, mcproto.Limits{})
	store := map[string][]byte{}
	flags := map[string]uint32{}
	var out []byte
	var req mcproto.Request
	for {
		err := c.Next(&req)
		var perr *mcproto.Error
		switch {
		case errors.As(err, &perr):
			out = append(out, perr.Reply...)
			if perr.Close {
				return
			}
			continue
		case err == io.EOF:
			show(out)
			return
		case err != nil:
			fmt.Println("read error:", err)
			return
		}
		switch req.Op {
		case mcproto.OpSet:
			k := string(req.Keys[0])
			store[k], flags[k] = append([]byte(nil), req.Data...), req.Flags // Data is only valid until Next
			out = c.AppendStatus(out, req.Echo, mcproto.StatusStored, 1)
		case mcproto.OpGet:
			if v, ok := store[string(req.Keys[0])]; ok {
				out = c.AppendHit(out, req.Echo, req.Keys[0], flags[string(req.Keys[0])], v, 1)
			} else {
				out = c.AppendMiss(out, req.Echo, req.Keys[0])
			}
			out = c.AppendEnd(out, req.Echo)
		case mcproto.OpNoop:
			out = c.AppendStatus(out, req.Echo, mcproto.StatusNoop, 0)
		}
	}
	// Output:
	// opcode 0x0d opaque 2 status 0x0000 flags 42 key "greeting" value "hello"
	// opcode 0x1b opaque 4 status 0x0081 key "" value "Unknown command"
	// opcode 0x0a opaque 5 status 0x0000 key "" value ""
}

// show prints each response of b.
func show(b []byte) {
	for len(b) >= mcbinary.HeaderLen {
		keyLen, extLen := int(binary.BigEndian.Uint16(b[2:4])), int(b[4])
		body := b[mcbinary.HeaderLen : mcbinary.HeaderLen+int(binary.BigEndian.Uint32(b[8:12]))]
		fmt.Printf("opcode 0x%02x opaque %d status 0x%04x ", b[1], binary.BigEndian.Uint32(b[12:16]), binary.BigEndian.Uint16(b[6:8]))
		if extLen == 4 {
			fmt.Printf("flags %d ", binary.BigEndian.Uint32(body[:4]))
		}
		fmt.Printf("key %q value %q\n", body[extLen:extLen+keyLen], body[extLen+keyLen:])
		b = b[mcbinary.HeaderLen+len(body):]
	}
}
