package ascii

import (
	"io"
	"slices"
	"strconv"

	"github.com/kvd-project/kvd/internal/mcproto"
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

// Error lines without "\r\n", as memcached 1.6 words them. The parser
// answers the first group; the encoder renders the second group's outcomes.
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

// The meta commands' error lines, memcached 1.6.18's words (the meta
// commands also answer MsgError, MsgBadCommandLine, MsgBadDataChunk and
// MsgObjectTooLarge). Their wording differs by command where memcached's
// does.
const (
	// MsgFlagsAreTooLong: an mg line of 20 words or more;
	// MsgFlagsTooLong the same for ms, md and ma.
	MsgFlagsAreTooLong = "CLIENT_ERROR options flags are too long"
	MsgFlagsTooLong    = "CLIENT_ERROR options flags too long"
	// Flag errors of mg, ms: md and ma answer MsgInvalidOrDuplicateFlag
	// for every one of them.
	MsgDuplicateFlag     = "CLIENT_ERROR duplicate flag"
	MsgInvalidFlag       = "CLIENT_ERROR invalid flag"
	MsgBadToken          = "CLIENT_ERROR bad token in command line format"
	MsgMTokenLength      = "CLIENT_ERROR incorrect length for M token"
	MsgInvalidInitial    = "CLIENT_ERROR invalid numeric initial value"
	MsgInvalidDeltaValue = "CLIENT_ERROR invalid numeric delta value"
	MsgDecodingKey       = "CLIENT_ERROR error decoding key"
	// MsgInvalidOrDuplicateFlag is md's and ma's answer to any flag error.
	MsgInvalidOrDuplicateFlag = "CLIENT_ERROR invalid or duplicate flag"
	MsgInvalidModeMS          = "CLIENT_ERROR invalid mode for ms M token"
	MsgInvalidModeMA          = "CLIENT_ERROR invalid mode for ma M token"
	MsgOpaqueTooLong          = "CLIENT_ERROR opaque token too long"
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

// AppendLine appends line and "\r\n".
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

// Codec is the text protocol's codec over one connection: a Reader for
// requests and the encoder of their replies. The meta commands share it
// (they share the line reader); their replies go through AppendMeta.
type Codec struct {
	*Reader
}

// NewCodec returns the codec of a connection whose bytes come from r.
func NewCodec(r io.Reader, lim mcproto.Limits) *Codec {
	return &Codec{Reader: NewReader(r, lim)}
}

var _ mcproto.Codec = (*Codec)(nil)

// statusLines are the text protocol's lines for each mcproto.Status.
var statusLines = [...]string{
	mcproto.StatusStored:    ReplyStored,
	mcproto.StatusNotStored: ReplyNotStored,
	mcproto.StatusExists:    ReplyExists,
	mcproto.StatusNotFound:  ReplyNotFound,
	mcproto.StatusDeleted:   ReplyDeleted,
	mcproto.StatusTouched:   ReplyTouched,
	mcproto.StatusOK:        ReplyOK,
	mcproto.StatusReset:     ReplyReset,
	mcproto.StatusNoop:      "MN\r\n", // meta's mn; the text protocol has no noop
}

// AppendHit appends a VALUE entry; gets and gats carry the CAS token. A
// touch that found its item answers TOUCHED.
func (*Codec) AppendHit(dst []byte, e mcproto.Echo, key []byte, flags uint32, value []byte, cas uint64) []byte {
	if e.Noreply {
		return dst
	}
	if e.Op == mcproto.OpTouch {
		return append(dst, ReplyTouched...)
	}
	return AppendValue(dst, key, flags, value, cas, e.Op == mcproto.OpGets || e.Op == mcproto.OpGats)
}

// AppendMiss appends nothing: the text protocol leaves misses out.
func (*Codec) AppendMiss(dst []byte, _ mcproto.Echo, _ []byte) []byte { return dst }

// AppendEnd appends END.
func (*Codec) AppendEnd(dst []byte, e mcproto.Echo) []byte {
	if e.Noreply {
		return dst
	}
	return AppendEnd(dst)
}

// AppendStatus appends the outcome's line (STORED, NOT_FOUND, …); quit
// closes without one.
func (*Codec) AppendStatus(dst []byte, e mcproto.Echo, s mcproto.Status, _ uint64) []byte {
	if e.Noreply || s == mcproto.StatusQuit {
		return dst
	}
	if int(s) < len(statusLines) && statusLines[s] != "" {
		return append(dst, statusLines[s]...)
	}
	return AppendServerError(dst, "unexpected status "+strconv.Itoa(int(s)))
}

// AppendNumber appends incr's or decr's new value.
func (*Codec) AppendNumber(dst []byte, e mcproto.Echo, v, _ uint64) []byte {
	if e.Noreply {
		return dst
	}
	return AppendUint(dst, v)
}

// AppendVersion appends "VERSION <version>".
func (*Codec) AppendVersion(dst []byte, e mcproto.Echo, version string) []byte {
	if e.Noreply {
		return dst
	}
	return AppendVersion(dst, version)
}

// AppendStat appends "STAT <name> <value>".
func (*Codec) AppendStat(dst []byte, _ mcproto.Echo, name, value string) []byte {
	return AppendStat(dst, name, value)
}

// AppendStatUint appends "STAT <name> <v>".
func (*Codec) AppendStatUint(dst []byte, _ mcproto.Echo, name string, v uint64) []byte {
	return AppendStatUint(dst, name, v)
}

// AppendError appends the error line of kind: memcached's fixed words for
// the kinds that have them, msg after SERVER_ERROR or CLIENT_ERROR for the
// others. noreply suppresses errors too, as in memcached.
func (*Codec) AppendError(dst []byte, e mcproto.Echo, kind mcproto.ErrorKind, msg string) []byte {
	if e.Noreply {
		return dst
	}
	switch kind {
	case mcproto.KindError:
		return append(dst, ReplyError...)
	case mcproto.KindClient, mcproto.KindAuth:
		return AppendClientError(dst, msg)
	case mcproto.KindOutOfMemory:
		return AppendLine(dst, MsgOutOfMemoryStore)
	case mcproto.KindTooLarge:
		return AppendLine(dst, MsgObjectTooLarge)
	case mcproto.KindNonNumeric:
		return AppendLine(dst, MsgNonNumericValue)
	}
	return AppendServerError(dst, msg)
}

// Open is NewCodec as an mcserver codec constructor.
func Open(r io.Reader, lim mcproto.Limits) (mcproto.Decoder, mcproto.Encoder) {
	c := NewCodec(r, lim)
	return c, c
}
