package mcproto

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOpString(t *testing.T) {
	for c := OpGet; c < NumOps; c++ {
		assert.NotContains(t, c.String(), "Op(")
	}
	assert.Equal(t, "flush_all", OpFlushAll.String())
	assert.Equal(t, "Op(0)", Op(0).String())
	assert.Equal(t, "Op(200)", Op(200).String())
	assert.True(t, OpCas.IsStorage())
	assert.False(t, OpIncr.IsStorage())
	assert.True(t, OpGats.IsRetrieval())
	assert.False(t, OpSet.IsRetrieval())
}

func TestErrorString(t *testing.T) {
	assert.Equal(t, "mcproto: ERROR", ReplyError("ERROR", false).Error())
	assert.Equal(t, "mcproto: suppressed by noreply: CLIENT_ERROR bad data chunk", ReplyError("CLIENT_ERROR bad data chunk", true).Error())
	assert.Equal(t, "mcproto: HTTP request on the memcache port", CloseError("HTTP request on the memcache port").Error())
}

// TestNumbers pins the C strto* semantics memcached relies on.
func TestNumbers(t *testing.T) {
	u64 := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"+42", 42, true}, {"-0", 0, true}, {"007", 7, true},
		{"18446744073709551615", 1<<64 - 1, true}, {"18446744073709551616", 0, false},
		{"99999999999999999999999", 0, false}, {"-1", 0, false},
		{"-18446744073709551615", 1, true}, // strtoull negates modulo 2^64; 1 is not "negative"
		{"-9223372036854775808", 1 << 63, false},
		{"\t5", 5, true}, {"\v5", 5, true}, {"5\t", 5, true}, {"5\tx", 5, true}, {"5\r", 5, true},
		{"", 0, false}, {"+", 0, false}, {"-", 0, false}, {"x", 0, false}, {"5x", 0, false},
		{"0x10", 0, false}, {"1e3", 0, false}, {"++1", 0, false}, {" 5", 5, true},
	}
	for _, tt := range u64 {
		got, ok := ParseUint64([]byte(tt.in))
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		if ok {
			assert.Equal(t, tt.want, got, "%q", tt.in)
		}
	}
	i32 := []struct {
		in   string
		want int32
		ok   bool
	}{
		{"0", 0, true}, {"-1", -1, true}, {"2592000", 2592000, true}, {"2147483647", 2147483647, true},
		{"2147483648", -2147483648, true}, {"4294967295", -1, true}, {"4294967296", 0, true}, {"4294967297", 1, true},
		{"9223372036854775807", -1, true}, {"9223372036854775808", 0, false},
		{"-9223372036854775808", 0, true}, {"-9223372036854775809", 0, false},
		{"x", 0, false}, {"1x", 0, false}, {"1 ", 1, true},
	}
	for _, tt := range i32 {
		got, ok := ParseInt32([]byte(tt.in))
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		if ok {
			assert.Equal(t, tt.want, got, "%q", tt.in)
		}
	}
	u32 := []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"4294967295", 1<<32 - 1, true}, {"4294967296", 0, true}, {"4294967297", 1, true}, {"-1", 0, false}, {"-0", 0, true},
	}
	for _, tt := range u32 {
		got, ok := ParseUint32([]byte(tt.in))
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		if ok {
			assert.Equal(t, tt.want, got, "%q", tt.in)
		}
	}
}
