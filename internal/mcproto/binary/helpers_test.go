package binary

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// pkt builds a request whose lengths agree with its parts.
func pkt(opcode uint8, key, extras, value string, cas uint64, opaque uint32) []byte {
	return rawPkt(opcode, len(key), len(extras), len(extras)+len(key)+len(value), cas, opaque, extras+key+value)
}

// rawPkt builds a request header with the lengths given, followed by body.
func rawPkt(opcode uint8, keyLen, extLen, bodyLen int, cas uint64, opaque uint32, body string) []byte {
	h := make([]byte, HeaderLen, HeaderLen+len(body))
	h[0] = RequestMagic
	h[1] = opcode
	binary.BigEndian.PutUint16(h[2:4], uint16(keyLen))
	h[4] = uint8(extLen)
	binary.BigEndian.PutUint32(h[8:12], uint32(bodyLen))
	binary.BigEndian.PutUint32(h[12:16], opaque)
	binary.BigEndian.PutUint64(h[16:24], cas)
	return append(h, body...)
}

func be32(v uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return string(b[:])
}

func be64(v uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return string(b[:])
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// describe renders what one Next returned, for table tests and for
// comparing decodings of the same bytes.
func describe(req *mcproto.Request, err error) string {
	var pe *mcproto.Error
	switch {
	case errors.As(err, &pe):
		s := "close"
		if len(pe.Reply) > 0 {
			r, _ := parseResponse(pe.Reply)
			s = fmt.Sprintf("error 0x%02x %q opcode=0x%02x opaque=%d close=%v", r.status, r.value, r.opcode, r.opaque, pe.Close)
			if len(r.rest) > 0 {
				s += " TRAILING"
			}
		} else if !pe.Close {
			s = "EMPTY REPLY, NOT CLOSED"
		}
		if pe.TooLarge {
			s += fmt.Sprintf(" too-large %s %q flags=%d exptime=%d cas=%d", req.Op, req.Keys, req.Flags, req.Exptime, req.CAS)
		}
		return s
	case err == io.EOF:
		return "EOF"
	case err != nil:
		return "err " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s", req.Op)
	if len(req.Keys) > 0 {
		fmt.Fprintf(&b, " %q", req.Keys)
	}
	if req.Flags != 0 {
		fmt.Fprintf(&b, " flags=%d", req.Flags)
	}
	if req.Exptime != 0 {
		fmt.Fprintf(&b, " exptime=%d", req.Exptime)
	}
	if req.CAS != 0 {
		fmt.Fprintf(&b, " cas=%d", req.CAS)
	}
	if req.Delta != 0 || req.Initial != 0 || req.Create {
		fmt.Fprintf(&b, " delta=%d initial=%d create=%v", req.Delta, req.Initial, req.Create)
	}
	if req.HasDelay {
		fmt.Fprintf(&b, " delay=%d", req.Delay)
	}
	if req.Args != nil {
		fmt.Fprintf(&b, " args=%q", req.Args)
	}
	if req.Data != nil {
		fmt.Fprintf(&b, " data=%q", req.Data)
	}
	e := req.Echo
	fmt.Fprintf(&b, " [0x%02x opaque=%d", e.Opcode, e.Opaque)
	if e.Quiet {
		b.WriteString(" quiet")
	}
	if e.Op != req.Op || e.Proto != mcproto.Binary || e.Noreply {
		fmt.Fprintf(&b, " BAD ECHO %+v", e)
	}
	b.WriteString("]")
	return b.String()
}

// response is a decoded response, for tests.
type response struct {
	opcode          uint8
	status          Status
	opaque          uint32
	cas             uint64
	extras, key     []byte
	value           []byte
	rest            []byte // what followed the response
	datatype, magic uint8
}

// parseResponse decodes the first response of b.
func parseResponse(b []byte) (response, error) {
	if len(b) < HeaderLen {
		return response{}, fmt.Errorf("response of %d bytes", len(b))
	}
	r := response{magic: b[0], opcode: b[1], datatype: b[5],
		status: Status(binary.BigEndian.Uint16(b[6:8])),
		opaque: binary.BigEndian.Uint32(b[12:16]), cas: binary.BigEndian.Uint64(b[16:24])}
	keyLen, extLen := int(binary.BigEndian.Uint16(b[2:4])), int(b[4])
	bodyLen := int(binary.BigEndian.Uint32(b[8:12]))
	if len(b) < HeaderLen+bodyLen || extLen+keyLen > bodyLen {
		return response{}, fmt.Errorf("bad lengths in %x", b[:HeaderLen])
	}
	body := b[HeaderLen : HeaderLen+bodyLen]
	r.extras, r.key, r.value = body[:extLen], body[extLen:extLen+keyLen], body[extLen+keyLen:]
	r.rest = b[HeaderLen+bodyLen:]
	return r, nil
}

// decodeAll decodes in until EOF, a read error or a closing error.
func decodeAll(r io.Reader, lim mcproto.Limits, max int) []string {
	c := NewCodec(r, lim)
	var out []string
	var req mcproto.Request
	for range max {
		err := c.Next(&req)
		out = append(out, describe(&req, err))
		var pe *mcproto.Error
		if err != nil && (!errors.As(err, &pe) || pe.Close) {
			return out
		}
	}
	return append(out, "NO END")
}
