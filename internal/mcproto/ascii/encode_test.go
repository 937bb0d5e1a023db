package ascii

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/mcproto"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestAppendHelpers(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"value", AppendValue(nil, []byte("k"), 5, []byte("xyz"), 0, false), "VALUE k 5 3\r\nxyz\r\n"},
		{"value cas", AppendValue(nil, []byte("k"), 0, []byte("xyz"), 42, true), "VALUE k 0 3 42\r\nxyz\r\n"},
		{"value empty", AppendValue(nil, []byte("k"), 0, nil, 0, false), "VALUE k 0 0\r\n\r\n"},
		{"value max", AppendValue(nil, []byte("k"), 1<<32-1, []byte("\r\n"), 1<<64-1, true),
			"VALUE k 4294967295 2 18446744073709551615\r\n\r\n\r\n"},
		{"end", AppendEnd(nil), "END\r\n"},
		{"line", AppendLine(nil, MsgBadCommandLine), "CLIENT_ERROR bad command line format\r\n"},
		{"line injection", AppendLine(nil, "a\r\nb"), "a  b\r\n"},
		{"uint", AppendUint(nil, 0), "0\r\n"},
		{"uint max", AppendUint(nil, 1<<64-1), "18446744073709551615\r\n"},
		{"version", AppendVersion(nil, "1.6.21"), "VERSION 1.6.21\r\n"},
		{"stat", AppendStat(nil, "version", "1.6.21"), "STAT version 1.6.21\r\n"},
		{"stat uint", AppendStatUint(nil, "curr_items", 7), "STAT curr_items 7\r\n"},
		{"server error", AppendServerError(nil, "out of memory"), "SERVER_ERROR out of memory\r\n"},
		{"server error injection", AppendServerError(nil, "x\nSTORED"), "SERVER_ERROR x STORED\r\n"},
		{"client error", AppendClientError(nil, "bad data chunk"), "CLIENT_ERROR bad data chunk\r\n"},
		{"appends", AppendEnd(append([]byte("x"), ReplyStored...)), "xSTORED\r\nEND\r\n"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, string(tt.got), tt.name)
	}
}

// TestAuthErrors: an authentication error is CLIENT_ERROR and its words,
// as memcached's -Y mode answers; the session clears noreply itself.
func TestAuthErrors(t *testing.T) {
	c := &Codec{}
	for _, tt := range []struct {
		msg, want string
		noreply   bool
	}{
		{"unauthenticated", "CLIENT_ERROR unauthenticated\r\n", false},
		{"authentication failure", "CLIENT_ERROR authentication failure\r\n", false},
		{"unauthenticated", "", true},
	} {
		e := mcproto.Echo{Proto: mcproto.Text, Op: mcproto.OpSet, Noreply: tt.noreply}
		assert.Equal(t, tt.want, string(c.AppendError(nil, e, mcproto.KindAuth, tt.msg)), "%q noreply=%v", tt.msg, tt.noreply)
	}
}

// TestRepliesGolden encodes one reply of each kind into a single stream and
// compares it with testdata/replies.golden (go test -run Golden -update
// rewrites it).
func TestRepliesGolden(t *testing.T) {
	var b []byte
	b = AppendValue(b, []byte("foo"), 0, []byte("bar"), 0, false)
	b = AppendValue(b, []byte("baz"), 4294967295, []byte(""), 0, false)
	b = AppendEnd(b)
	b = AppendValue(b, []byte("foo"), 3, []byte("bar"), 12345, true)
	b = AppendEnd(b)
	for _, s := range []string{ReplyStored, ReplyNotStored, ReplyExists, ReplyNotFound, ReplyDeleted,
		ReplyTouched, ReplyOK, ReplyError, ReplyEnd, ReplyReset} {
		b = append(b, s...)
	}
	for _, m := range []string{MsgError, MsgBadCommandLine, MsgBadDataChunk, MsgInvalidExptime, MsgInvalidDelta,
		MsgDeleteUsage, MsgObjectTooLarge, MsgNonNumericValue, MsgOutOfMemoryStore} {
		b = AppendLine(b, m)
	}
	b = AppendUint(b, 18446744073709551615)
	b = AppendVersion(b, "1.6.21")
	b = AppendStat(b, "pid", "1234")
	b = AppendStatUint(b, "uptime", 99)
	b = AppendEnd(b)
	b = AppendServerError(b, "out of memory")
	b = AppendClientError(b, "line too long")

	path := filepath.Join("testdata", "replies.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(b))
}

func TestAppendDoesNotAllocate(t *testing.T) {
	dst := make([]byte, 0, 4096)
	key, data := []byte("somekey"), []byte("some value")
	allocs := testing.AllocsPerRun(100, func() {
		d := AppendValue(dst[:0], key, 1, data, 99, true)
		d = AppendEnd(d)
		d = AppendUint(d, 12345)
		_ = AppendStatUint(d, "x", 1)
	})
	assert.Zero(t, allocs)
}
