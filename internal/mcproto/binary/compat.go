package binary

import "encoding/binary"

// AppendNotSupported appends the response kvd sent to every binary request
// before it served the protocol: status 0x0083 "not supported", the
// opcode and opaque of hdr (a request header, at least HeaderLen bytes),
// and a short explanation. Nothing in the codec sends it any more; it
// stays until the memcache package's tests that build their expectation
// with it are rewritten for the served protocol.
func AppendNotSupported(dst, hdr []byte) []byte {
	const msg = "binary protocol not supported by kvd: use the text protocol"
	var opaque uint32
	if len(hdr) >= HeaderLen {
		opaque = binary.BigEndian.Uint32(hdr[12:16])
	}
	var opcode uint8
	if len(hdr) > 1 {
		opcode = hdr[1]
	}
	dst = appendHeader(dst, opcode, 0x0083, opaque, 0, 0, 0, len(msg))
	return append(dst, msg...)
}
