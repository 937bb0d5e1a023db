package fsm

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestParseCounter: stored values as incr reads them (the rows up to the
// blank line were checked against memcached 1.6.18; the table was
// mcproto's, whose copy of the rule went when fsm took it over): the end
// of the value and a NUL end the number like whitespace does.
func TestParseCounter(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"12", 12, true}, {"12 ", 12, true}, {" 12", 12, true}, {"\t12", 12, true}, {"+12", 12, true},
		{"-0", 0, true}, {"12 ab", 12, true}, {"12\tab", 12, true}, {"12 0", 12, true},
		{"1\n2", 1, true}, {"1\r", 1, true}, {"1\x002", 1, true}, {"000000000000000000001", 1, true},
		{"18446744073709551615", 1<<64 - 1, true}, {"18446744073709551615 -", 0, false}, {"1 -", 1, true},
		{"18446744073709551616", 0, false}, {"-1", 0, false}, {"", 0, false}, {"   ", 0, false},
		{"\x0012", 0, false}, {"12ab", 0, false}, {"ab", 0, false}, {"-", 0, false},

		// strtoull's negation modulo 2^64, and safe_strtoull's strchr.
		{"-18446744073709551615", 1, true}, {"-9223372036854775808", 0, false},
		{"9223372036854775808", 1 << 63, true}, {"9223372036854775808 -", 0, false},
		{"9223372036854775808\x00-", 1 << 63, true}, // the NUL ends the C string
		{"\v\f12\n", 12, true}, {"+-1", 0, false}, {"1+", 0, false},
		{"99999999999999999999999", 0, false}, {"5      ", 5, true},
	} {
		got, ok := parseCounter([]byte(tt.in))
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		if ok {
			assert.Equal(t, tt.want, got, "%q", tt.in)
		}
	}
}

// TestFormatCounter: a number that got shorter keeps the old length, padded
// with spaces, as memcached's in-place rewrite leaves it.
func TestFormatCounter(t *testing.T) {
	for _, tt := range []struct {
		n      uint64
		oldLen int
		want   string
	}{
		{10, 2, "10"}, {9, 2, "9 "}, {0, 5, "0    "}, {100, 2, "100"},
		{1<<64 - 1, 0, "18446744073709551615"},
	} {
		assert.Equal(t, tt.want, string(formatCounter(tt.n, tt.oldLen)), "%d over %d bytes", tt.n, tt.oldLen)
	}
}
