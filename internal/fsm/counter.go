package fsm

import (
	"bytes"
	"math"
	"strconv"
)

// incr and decr read and write a stored value as memcached does. These are
// item rules, not protocol: the value was stored by whatever command or
// protocol, and every member must read it alike, so the state machine owns
// the reading rather than borrow a client codec's.

// parseCounter reads a stored value the way memcached's incr and decr do:
// safe_strtoull (util.c) over the item's data, which in memcached is
// followed by "\r\n" (so the end of the value counts as whitespace) and
// read as a C string (so a NUL ends it). As strtoull does, it skips leading
// C whitespace, takes one '+' or '-', and reads base-10 digits, refusing a
// value that overflows 64 bits; the digits must end the value or be
// followed by a whitespace byte, after which anything goes (a value an
// earlier decr padded with spaces and a client then appended to still
// counts). A '-' negates modulo 2^64, and a result of 2^63 or more is
// refused when a '-' is anywhere in the value, as memcached looks for one
// with strchr; its search also runs on past the value's "\r\n" into
// whatever memory follows, which is taken here as a fresh memcached's
// zeroed memory (no '-').
func parseCounter(v []byte) (uint64, bool) {
	if i := bytes.IndexByte(v, 0); i >= 0 {
		v = v[:i]
	}
	i := 0
	for i < len(v) && isCSpace(v[i]) {
		i++
	}
	neg := false
	if i < len(v) && (v[i] == '+' || v[i] == '-') {
		neg = v[i] == '-'
		i++
	}
	start := i
	var n uint64
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		d := uint64(v[i] - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false // strtoull: ERANGE
		}
		n = n*10 + d
	}
	if i == start || i < len(v) && !isCSpace(v[i]) {
		return 0, false
	}
	if neg {
		n = -n
	}
	if n > math.MaxInt64 && bytes.IndexByte(v, '-') >= 0 {
		return 0, false
	}
	return n, true
}

// isCSpace is C isspace in the "C" locale.
func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// formatCounter writes n; when the number got shorter, memcached rewrites the
// value in place and pads it with spaces to the old length, and so do we.
func formatCounter(n uint64, oldLen int) []byte {
	v := strconv.AppendUint(nil, n, 10)
	for len(v) < oldLen {
		v = append(v, ' ')
	}
	return v
}
