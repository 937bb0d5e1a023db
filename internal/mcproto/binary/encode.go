package binary

import (
	"encoding/binary"
	"slices"
	"strconv"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// AppendResponse appends one response: the header (magic 0x81, opcode,
// status, opaque and CAS as given, the lengths of the parts), then extras,
// key and value. Keys are at most 250 bytes and extras at most 4 in every
// response kvd sends; the lengths are not checked.
func AppendResponse(dst []byte, opcode uint8, s Status, opaque uint32, cas uint64, extras, key, value []byte) []byte {
	dst = slices.Grow(dst, HeaderLen+len(extras)+len(key)+len(value))
	dst = appendHeader(dst, opcode, s, opaque, cas, len(extras), len(key), len(value))
	dst = append(dst, extras...)
	dst = append(dst, key...)
	return append(dst, value...)
}

func appendHeader(dst []byte, opcode uint8, s Status, opaque uint32, cas uint64, extLen, keyLen, valueLen int) []byte {
	var h [HeaderLen]byte
	h[0] = ResponseMagic
	h[1] = opcode
	binary.BigEndian.PutUint16(h[2:4], uint16(keyLen))
	h[4] = uint8(extLen)
	// h[5], the data type, is 0 (raw bytes), as in every memcached response.
	binary.BigEndian.PutUint16(h[6:8], uint16(s))
	binary.BigEndian.PutUint32(h[8:12], uint32(extLen+keyLen+valueLen))
	binary.BigEndian.PutUint32(h[12:16], opaque)
	binary.BigEndian.PutUint64(h[16:24], cas)
	return append(dst, h[:]...)
}

// appendErrorResponse appends an error response to the request e echoes:
// status s, msg as the value, CAS 0. memcached sends errors whatever the
// opcode's quietness.
func appendErrorResponse(dst []byte, e mcproto.Echo, s Status, msg string) []byte {
	dst = appendHeader(dst, e.Opcode, s, e.Opaque, 0, 0, 0, len(msg))
	return append(dst, msg...)
}

// appendSuccess appends an empty success response carrying cas.
func appendSuccess(dst []byte, e mcproto.Echo, cas uint64) []byte {
	return appendHeader(dst, e.Opcode, StatusSuccess, e.Opaque, cas, 0, 0, 0)
}

// appendStatsEnd appends the empty Stat packet that ends a stats reply.
func appendStatsEnd(dst []byte, e mcproto.Echo) []byte {
	return appendHeader(dst, OpcodeStat, StatusSuccess, e.Opaque, 0, 0, 0, 0)
}

// AppendHit appends a hit of Get, GetQ, GetK, GetKQ, GAT, GATQ, GATK or
// GATKQ: the flags as extras, the key for the K opcodes, the value, the
// CAS in the header. Quiet gets answer hits too. For a Touch it appends
// what memcached answers to a touch that found the item: the flags and the
// CAS, no value.
func (*Codec) AppendHit(dst []byte, e mcproto.Echo, key []byte, flags uint32, value []byte, cas uint64) []byte {
	if !returnsKey(e.Opcode) {
		key = nil
	}
	if e.Opcode == OpcodeTouch {
		value = nil
	}
	var ext [4]byte
	binary.BigEndian.PutUint32(ext[:], flags)
	return AppendResponse(dst, e.Opcode, StatusSuccess, e.Opaque, cas, ext[:], key, value)
}

// AppendMiss appends nothing for a quiet get (GetQ, GetKQ, GATQ, GATKQ);
// for GetK and GATK, status "not found" with the key and no message, as
// memcached does; for the others "Not found".
func (*Codec) AppendMiss(dst []byte, e mcproto.Echo, key []byte) []byte {
	switch {
	case e.Quiet:
		return dst
	case returnsKey(e.Opcode):
		return AppendResponse(dst, e.Opcode, StatusKeyNotFound, e.Opaque, 0, nil, key, nil)
	}
	return appendErrorResponse(dst, e, StatusKeyNotFound, MsgNotFound)
}

// AppendEnd appends the empty packet that ends a Stat reply; it appends
// nothing after a get, whose requests carry one key each.
func (*Codec) AppendEnd(dst []byte, e mcproto.Echo) []byte {
	if e.Op == mcproto.OpStats {
		return appendStatsEnd(dst, e)
	}
	return dst
}

// AppendStatus appends the response of an outcome. Successes (stored,
// deleted, touched, OK, noop, quit) are empty success responses carrying
// cas, and a quiet request gets none of them; failures are error
// responses, whatever the quietness. NotStored is worded as memcached
// words it per command: an add that found the key "Data exists for key.",
// a replace that did not "Not found", the others "Not stored.". On a Stat
// request OK and Reset (stats reset, stats detail on|off) are the empty
// packet that ends a stats reply.
//
// memcached answers a Touch that found its item with the item's flags as
// extras, which this outcome does not carry: use AppendHit for that
// response to match it byte for byte. AppendStatus(StatusTouched) sends no
// extras.
func (*Codec) AppendStatus(dst []byte, e mcproto.Echo, s mcproto.Status, cas uint64) []byte {
	switch s {
	case mcproto.StatusNotStored:
		switch e.Op {
		case mcproto.OpAdd:
			return appendErrorResponse(dst, e, StatusKeyExists, MsgExists)
		case mcproto.OpReplace:
			return appendErrorResponse(dst, e, StatusKeyNotFound, MsgNotFound)
		}
		return appendErrorResponse(dst, e, StatusNotStored, MsgNotStored)
	case mcproto.StatusExists:
		return appendErrorResponse(dst, e, StatusKeyExists, MsgExists)
	case mcproto.StatusNotFound:
		return appendErrorResponse(dst, e, StatusKeyNotFound, MsgNotFound)
	case mcproto.StatusOK, mcproto.StatusReset:
		if e.Op == mcproto.OpStats {
			return appendStatsEnd(dst, e)
		}
		fallthrough
	case mcproto.StatusStored, mcproto.StatusDeleted, mcproto.StatusTouched, mcproto.StatusNoop, mcproto.StatusQuit:
		if e.Quiet {
			return dst
		}
		return appendSuccess(dst, e, cas)
	}
	return appendErrorResponse(dst, e, StatusInternalError, "unexpected status "+strconv.Itoa(int(s)))
}

// AppendNumber appends incr's or decr's new value, 8 bytes big-endian,
// with the item's CAS; nothing for a quiet request.
func (*Codec) AppendNumber(dst []byte, e mcproto.Echo, v, cas uint64) []byte {
	if e.Quiet {
		return dst
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return AppendResponse(dst, e.Opcode, StatusSuccess, e.Opaque, cas, nil, nil, b[:])
}

// AppendVersion appends the version string as a success response's value.
func (*Codec) AppendVersion(dst []byte, e mcproto.Echo, version string) []byte {
	dst = appendHeader(dst, e.Opcode, StatusSuccess, e.Opaque, 0, 0, 0, len(version))
	return append(dst, version...)
}

// AppendStat appends one Stat packet: the name as key, the value as value.
func (*Codec) AppendStat(dst []byte, e mcproto.Echo, name, value string) []byte {
	dst = appendHeader(dst, OpcodeStat, StatusSuccess, e.Opaque, 0, 0, len(name), len(value))
	dst = append(dst, name...)
	return append(dst, value...)
}

// AppendStatUint appends one Stat packet of a counter, in decimal.
func (c *Codec) AppendStatUint(dst []byte, e mcproto.Echo, name string, v uint64) []byte {
	var b [20]byte
	num := strconv.AppendUint(b[:0], v, 10)
	dst = appendHeader(dst, OpcodeStat, StatusSuccess, e.Opaque, 0, 0, len(name), len(num))
	dst = append(dst, name...)
	return append(dst, num...)
}

// AppendError appends the error response of kind, whatever the request's
// quietness, as memcached would send it:
//
//   - KindError: 0x0081 "Unknown command"; on a Stat request 0x0001 "Not
//     found", memcached's answer to a stats group it does not know;
//   - KindClient: 0x0004 "Invalid arguments" (on a Stat, "Not found" as
//     above);
//   - KindNonNumeric: 0x0006, KindTooLarge: 0x0003, with memcached's words;
//   - KindOutOfMemory: 0x0082 with memcached's words for a store ("Out of
//     memory allocating item") or for incr and decr;
//   - KindAuth: 0x0020 "Auth failure.", memcached's answer to a failed
//     SASL authentication and to any request but SASL's and Version on a
//     connection that has not authenticated;
//   - KindBusy: 0x0085 Busy, and KindServer: 0x0086 Temporary failure, with
//     msg as the value. memcached 1.6.18 sends neither; they are the
//     protocol's statuses for a server that cannot serve now. KindServer's
//     causes (no quorum or leader, a timeout, shutting down) pass, so a
//     client may retry later: 0x0084 Internal error would tell it the
//     server is broken. A write whose outcome is unknown says so in msg.
func (*Codec) AppendError(dst []byte, e mcproto.Echo, kind mcproto.ErrorKind, msg string) []byte {
	switch kind {
	case mcproto.KindError, mcproto.KindClient:
		if e.Op == mcproto.OpStats {
			return appendErrorResponse(dst, e, StatusKeyNotFound, MsgNotFound)
		}
		if kind == mcproto.KindClient {
			return appendErrorResponse(dst, e, StatusInvalidArguments, MsgInvalidArguments)
		}
		return appendErrorResponse(dst, e, StatusUnknownCommand, MsgUnknownCommand)
	case mcproto.KindNonNumeric:
		return appendErrorResponse(dst, e, StatusNonNumeric, MsgNonNumeric)
	case mcproto.KindTooLarge:
		return appendErrorResponse(dst, e, StatusTooLarge, MsgTooLarge)
	case mcproto.KindOutOfMemory:
		if e.Op == mcproto.OpIncr || e.Op == mcproto.OpDecr {
			return appendErrorResponse(dst, e, StatusOutOfMemory, MsgOutOfMemoryIncr)
		}
		return appendErrorResponse(dst, e, StatusOutOfMemory, MsgOutOfMemoryStore)
	case mcproto.KindAuth:
		return appendErrorResponse(dst, e, StatusAuthError, MsgAuthFailure)
	case mcproto.KindBusy:
		return appendErrorResponse(dst, e, StatusBusy, orDefault(msg, MsgBusy))
	}
	return appendErrorResponse(dst, e, StatusTemporaryFailure, orDefault(msg, MsgTemporaryFailure))
}

// AppendSASL appends a success response to a SASL request, body as its
// value: the mechanisms (SASL list) or memcached's "Authenticated" (SASL
// auth). mcproto.SASLEncoder.
func (*Codec) AppendSASL(dst []byte, e mcproto.Echo, body string) []byte {
	dst = appendHeader(dst, e.Opcode, StatusSuccess, e.Opaque, 0, 0, 0, len(body))
	return append(dst, body...)
}

var _ mcproto.SASLEncoder = (*Codec)(nil)

func orDefault(msg, def string) string {
	if msg == "" {
		return def
	}
	return msg
}
