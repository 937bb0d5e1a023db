package mcproto

import (
	"bytes"
	"math"
)

// memcached parses numbers with strtoul/strtol/strtoull (base 10, LP64) and
// then its safe_strto* checks (util.c). The functions below reproduce that
// behaviour byte for byte, quirks included, so that kvd accepts and rejects
// exactly the lines memcached does:
//
//   - leading C whitespace and one '+' or '-' are accepted;
//   - the digits may be followed by the end of the token or by a whitespace
//     byte, after which anything is ignored ("1\tjunk" reads as 1);
//   - a value that overflows 64 bits is rejected;
//   - the unsigned forms negate a '-' number modulo 2^64; a result that
//     looks negative as a signed number (2^63 or more) is rejected when a
//     '-' is anywhere in the token, even after the digits, because memcached
//     looks for it with strchr over the whole string ("-0" is 0, and
//     "9223372036854775808\t-" is refused);
//   - memcached stores the 32-bit forms by plain C assignment, which keeps
//     the low 32 bits ("4294967296" as flags is 0, as exptime "4294967295"
//     is -1).

// isCSpace is C isspace in the "C" locale.
func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// scanC reads tok the way strtoull reads it: the magnitude, the sign, and
// end, where the digits stop. ok is false when there is no digit, when the
// magnitude overflows 64 bits, or when what follows the digits is not
// acceptable to memcached's safe_strto* helpers.
func scanC(tok []byte) (mag uint64, neg bool, end int, ok bool) {
	i := 0
	for i < len(tok) && isCSpace(tok[i]) {
		i++
	}
	if i < len(tok) && (tok[i] == '+' || tok[i] == '-') {
		neg = tok[i] == '-'
		i++
	}
	start := i
	overflow := false
	for ; i < len(tok) && tok[i] >= '0' && tok[i] <= '9'; i++ {
		d := uint64(tok[i] - '0')
		if overflow || mag > (math.MaxUint64-d)/10 {
			overflow = true
			continue
		}
		mag = mag*10 + d
	}
	if i == start || overflow {
		return 0, false, 0, false
	}
	if i < len(tok) && !isCSpace(tok[i]) {
		return 0, false, 0, false
	}
	return mag, neg, i, true
}

// parseUint64 is memcached's safe_strtoull. Its check for a minus sign,
// made only when the value is 2^63 or more, is strchr(str, '-'): it looks
// at the whole token, past what strtoull read.
func ParseUint64(tok []byte) (uint64, bool) {
	mag, neg, _, ok := scanC(tok)
	if !ok {
		return 0, false
	}
	v := mag
	if neg {
		v = -mag
	}
	if int64(v) < 0 && bytes.IndexByte(tok, '-') >= 0 {
		return 0, false
	}
	return v, true
}

// ParseUint32 is memcached's safe_strtoul stored into a 32-bit variable.
func ParseUint32(tok []byte) (uint32, bool) {
	v, ok := ParseUint64(tok) // unsigned long is 64-bit: same checks
	return uint32(v), ok
}

// parseInt32 is memcached's safe_strtol stored into an int32_t.
func ParseInt32(tok []byte) (int32, bool) {
	mag, neg, _, ok := scanC(tok)
	if !ok {
		return 0, false
	}
	if !neg && mag > math.MaxInt64 || neg && mag > 1<<63 {
		return 0, false // strtol: ERANGE
	}
	v := int64(mag)
	if neg {
		v = int64(-mag)
	}
	return int32(v), true
}
