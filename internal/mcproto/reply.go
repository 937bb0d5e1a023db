package mcproto

import (
	"encoding/binary"
	"slices"
	"strconv"
)

// Fixed reply lines, "\r\n" included, for append(dst, ReplyStored...).
const (
	ReplyStored    = "STORED\r\n"
	ReplyNotStored = "NOT_STORED\r\n"
	ReplyExists    = "EXISTS\r\n"
	ReplyNotFound  = "NOT_FOUND\r\n"
	ReplyDeleted   = "DELETED\r\n"
	ReplyTouched   = "TOUCHED\r\n"
	ReplyOK        = "OK\r\n"
	ReplyError     = "ERROR\r\n"
	ReplyEnd       = "END\r\n"
	ReplyReset     = "RESET\r\n"
)

// Error lines without "\r\n", as memcached 1.6 words them. The parser puts
// the first group in Error.Reply; the second group is for the server, which
// decides those outcomes.
const (
	MsgError            = "ERROR"
	MsgBadCommandLine   = "CLIENT_ERROR bad command line format"
	MsgBadDataChunk     = "CLIENT_ERROR bad data chunk"
	MsgShutdownDisabled = "ERROR: shutdown not enabled"
	MsgInvalidExptime   = "CLIENT_ERROR invalid exptime argument"
	MsgInvalidDelta     = "CLIENT_ERROR invalid numeric delta argument"
	MsgDeleteUsage      = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
	MsgObjectTooLarge   = "SERVER_ERROR object too large for cache"
	MsgNonNumericValue  = "CLIENT_ERROR cannot increment or decrement non-numeric value"
	MsgOutOfMemoryStore = "SERVER_ERROR out of memory storing object"
)

// AppendValue appends one entry of a get/gets/gat/gats reply:
// "VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n". withCAS selects the
// gets/gats form. dst grows at most once, with room for an END line after
// the entry: growing a get's reply from nil took five or six copies of a
// 512-byte value.
func AppendValue(dst []byte, key []byte, flags uint32, data []byte, cas uint64, withCAS bool) []byte {
	dst = slices.Grow(dst, len(key)+len(data)+valueOverhead)
	dst = append(dst, "VALUE "...)
	dst = append(dst, key...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(flags), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(len(data)), 10)
	if withCAS {
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, cas, 10)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, data...)
	return append(dst, "\r\n"...)
}

// valueOverhead bounds what AppendValue adds to the key and the data:
// "VALUE ", three numbers (flags, length, CAS) and their spaces, two CRLFs,
// and the END line that usually follows.
const valueOverhead = len("VALUE ") + 3*(1+20) + 2*len("\r\n") + len(ReplyEnd)

// AppendEnd appends "END\r\n", the end of a retrieval or stats reply.
func AppendEnd(dst []byte) []byte {
	return append(dst, ReplyEnd...)
}

// AppendLine appends line and "\r\n". It is how a server writes Error.Reply.
// Line breaks inside line are replaced by spaces so that one call can never
// produce two protocol lines.
func AppendLine(dst []byte, line string) []byte {
	dst = appendOneLine(dst, line)
	return append(dst, "\r\n"...)
}

// AppendUint appends a decimal counter line, "<v>\r\n": the reply of incr and
// decr.
func AppendUint(dst []byte, v uint64) []byte {
	dst = strconv.AppendUint(dst, v, 10)
	return append(dst, "\r\n"...)
}

// AppendVersion appends "VERSION <version>\r\n".
func AppendVersion(dst []byte, version string) []byte {
	dst = append(dst, "VERSION "...)
	dst = appendOneLine(dst, version)
	return append(dst, "\r\n"...)
}

// AppendStat appends one stats line, "STAT <name> <value>\r\n". The reply to
// stats is a run of these followed by AppendEnd.
func AppendStat(dst []byte, name, value string) []byte {
	dst = append(dst, "STAT "...)
	dst = appendOneLine(dst, name)
	dst = append(dst, ' ')
	dst = appendOneLine(dst, value)
	return append(dst, "\r\n"...)
}

// AppendStatUint is AppendStat for a counter: "STAT <name> <v>\r\n".
func AppendStatUint(dst []byte, name string, v uint64) []byte {
	dst = append(dst, "STAT "...)
	dst = appendOneLine(dst, name)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, v, 10)
	return append(dst, "\r\n"...)
}

// AppendServerError appends "SERVER_ERROR <msg>\r\n".
func AppendServerError(dst []byte, msg string) []byte {
	dst = append(dst, "SERVER_ERROR "...)
	dst = appendOneLine(dst, msg)
	return append(dst, "\r\n"...)
}

// AppendClientError appends "CLIENT_ERROR <msg>\r\n".
func AppendClientError(dst []byte, msg string) []byte {
	dst = append(dst, "CLIENT_ERROR "...)
	dst = appendOneLine(dst, msg)
	return append(dst, "\r\n"...)
}

// appendOneLine appends s with '\r' and '\n' replaced by spaces.
func appendOneLine(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return dst
}

// The binary protocol's framing, as much of it as kvd needs to refuse it: a
// request starts with binaryRequestMagic and a 24-byte header whose second
// byte is the opcode and whose bytes 12 to 15 are an opaque value the
// response echoes.
const (
	binaryRequestMagic  = 0x80
	binaryResponseMagic = 0x81
	BinaryHeaderLen     = 24
	// binaryNotSupported is the protocol's status "not supported".
	binaryNotSupported    = 0x0083
	binaryNotSupportedMsg = "binary protocol not supported by kvd: use the text protocol"
)

// AppendBinaryNotSupported appends the binary-protocol response refusing the
// request whose header is hdr (at least BinaryHeaderLen bytes): status "not
// supported", the request's opcode and opaque, and a short explanation as
// the value, so that a binary client fails at once with a reason.
func AppendBinaryNotSupported(dst, hdr []byte) []byte {
	var h [BinaryHeaderLen]byte
	h[0] = binaryResponseMagic
	h[1] = hdr[1]
	binary.BigEndian.PutUint16(h[6:8], binaryNotSupported)
	binary.BigEndian.PutUint32(h[8:12], uint32(len(binaryNotSupportedMsg)))
	copy(h[12:16], hdr[12:16])
	dst = append(dst, h[:]...)
	return append(dst, binaryNotSupportedMsg...)
}
