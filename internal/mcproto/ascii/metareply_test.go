package ascii

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// metaEcho parses line (a meta request without its data block) and
// returns its echo, as the server hands it to the encoder.
func metaEcho(t *testing.T, line string) mcproto.Echo {
	t.Helper()
	if strings.HasPrefix(line, "ms ") {
		line += "\r\nx" // a one-byte block: the tests' ms lines say 1
	}
	var req mcproto.Request
	require.NoError(t, NewReader(strings.NewReader(line+"\r\n"), mcproto.Limits{}).Next(&req), line)
	return req.Echo
}

const (
	hit      = mcproto.StatusHit
	miss     = mcproto.StatusNotFound
	stored   = mcproto.StatusStored
	notStord = mcproto.StatusNotStored
	exists   = mcproto.StatusExists
	deleted  = mcproto.StatusDeleted
)

// The expected replies are memcached 1.6.18's renderings (proto_text.c's
// process_m*_command and _finalize_mset) of the same outcome.
var metaReplyTests = []struct {
	name string
	req  string
	r    mcproto.MetaReply
	want string
}{
	// mg hit.
	{"mg HD", "mg a", mcproto.MetaReply{Status: hit, Value: []byte("x")}, "HD\r\n"},
	{"mg VA", "mg a v", mcproto.MetaReply{Status: hit, Value: []byte("hello")}, "VA 5\r\nhello\r\n"},
	{"mg VA empty", "mg a v", mcproto.MetaReply{Status: hit}, "VA 0\r\n\r\n"},
	{"mg VA binary", "mg a v", mcproto.MetaReply{Status: hit, Value: []byte("a\r\nb")}, "VA 4\r\na\r\nb\r\n"},
	{"mg every token", "mg a s v t c f l h k O123 q u",
		mcproto.MetaReply{Status: hit, Value: []byte("hi"), Size: 2, TTL: -1, CAS: 99, Flags: 5, LastAccess: 7, Fetched: true},
		"VA 2 s2 t-1 c99 f5 l7 h1 ka O123\r\nhi\r\n"},
	{"mg request order", "mg a O1 k h l f c t s",
		mcproto.MetaReply{Status: hit, Size: 3, TTL: 100, CAS: 1, Flags: 4294967295, LastAccess: 0},
		"HD O1 ka h0 l0 f4294967295 c1 t100 s3\r\n"},
	{"mg max numbers", "mg a c t", mcproto.MetaReply{Status: hit, CAS: 18446744073709551615, TTL: 2592000},
		"HD c18446744073709551615 t2592000\r\n"},
	{"mg silent tokens", "mg a N30 T10 R5 E7 P L x I q u", mcproto.MetaReply{Status: hit}, "HD\r\n"},
	{"mg Z", "mg a", mcproto.MetaReply{Status: hit, TokenSent: true}, "HD Z\r\n"},
	{"mg X W", "mg a c", mcproto.MetaReply{Status: hit, Stale: true, Won: true, CAS: 3}, "HD c3 X W\r\n"},
	{"mg Z X", "mg a", mcproto.MetaReply{Status: hit, Stale: true, TokenSent: true}, "HD Z X\r\n"},
	{"mg W", "mg a v", mcproto.MetaReply{Status: hit, Won: true}, "VA 0 W\r\n\r\n"},
	{"mg Z X W", "mg a", mcproto.MetaReply{Status: hit, TokenSent: true, Stale: true, Won: true}, "HD Z X W\r\n"},
	{"mg hit q", "mg a q v", mcproto.MetaReply{Status: hit, Value: []byte("x")}, "VA 1\r\nx\r\n"},
	{"mg b64 key", "mg Zm9v b k v", mcproto.MetaReply{Status: hit, Value: []byte("x")}, "VA 1 kZm9v b\r\nx\r\n"},
	{"mg b64 re-encoded", "mg Zm9v! b k", mcproto.MetaReply{Status: hit}, "HD kZm9v b\r\n"},
	{"mg b64 binary", "mg IGEK k b", mcproto.MetaReply{Status: hit}, "HD kIGEK b\r\n"},
	{"mg b64 padded", "mg Zm9vYg== b k", mcproto.MetaReply{Status: hit}, "HD kZm9vYg== b\r\n"},

	// mg miss.
	{"mg EN", "mg a v t c", mcproto.MetaReply{Status: miss}, "EN\r\n"},
	{"mg EN tokens", "mg a v k O1 t", mcproto.MetaReply{Status: miss}, "EN ka O1\r\n"},
	{"mg EN b64", "mg Zm9v b O1 k", mcproto.MetaReply{Status: miss}, "EN O1 kZm9v b\r\n"},
	{"mg EN q", "mg a q k O1", mcproto.MetaReply{Status: miss}, ""},

	// ms.
	{"ms HD", "ms a 1", mcproto.MetaReply{Status: stored, CAS: 7}, "HD\r\n"},
	{"ms HD c", "ms a 1 c", mcproto.MetaReply{Status: stored, CAS: 7}, "HD c7\r\n"},
	{"ms HD q", "ms a 1 q c O1 k", mcproto.MetaReply{Status: stored, CAS: 7}, ""},
	{"ms NS", "ms a 1 q c O1 k", mcproto.MetaReply{Status: notStord}, "NS c0 O1 ka\r\n"},
	{"ms EX", "ms a 1 k C5 c", mcproto.MetaReply{Status: exists}, "EX ka c0\r\n"},
	{"ms NF", "ms a 1 q C5 MR", mcproto.MetaReply{Status: miss}, "NF\r\n"},
	{"ms b64", "ms Zm9v 1 b k c", mcproto.MetaReply{Status: stored, CAS: 3}, "HD kZm9v b c3\r\n"},
	{"ms silent tokens", "ms a 1 T10 F5 I MS s t f v h l E9", mcproto.MetaReply{Status: stored, CAS: 9, Size: 1}, "HD\r\n"},

	// md.
	{"md HD", "md a", mcproto.MetaReply{Status: deleted}, "HD\r\n"},
	{"md HD q", "md a q O1", mcproto.MetaReply{Status: deleted}, ""},
	{"md tokens", "md a O1 k c t I T30 x", mcproto.MetaReply{Status: deleted, CAS: 5, TTL: 3}, "HD O1 ka\r\n"},
	{"md NF q", "md a q", mcproto.MetaReply{Status: miss}, "NF\r\n"},
	{"md EX", "md a C1 k", mcproto.MetaReply{Status: exists}, "EX ka\r\n"},
	{"md NS", "md a x O9", mcproto.MetaReply{Status: notStord}, "NS O9\r\n"},
	{"md b64", "md Zm9v b k", mcproto.MetaReply{Status: miss}, "NF kZm9v b\r\n"},

	// ma.
	{"ma HD", "ma a", mcproto.MetaReply{Status: hit, Value: []byte("5")}, "HD\r\n"},
	{"ma VA", "ma a v", mcproto.MetaReply{Status: hit, Value: []byte("5")}, "VA 1\r\n5\r\n"},
	{"ma tokens", "ma a v t c k O1 N0 T0 D5 J1 s f h l MI",
		mcproto.MetaReply{Status: hit, Value: []byte("15"), CAS: 9, TTL: -1, Size: 2, Flags: 3},
		"VA 2 t-1 c9 ka O1\r\n15\r\n"},
	{"ma max", "ma a v c", mcproto.MetaReply{Status: hit, Value: []byte("18446744073709551615"), CAS: 2},
		"VA 20 c2\r\n18446744073709551615\r\n"},
	{"ma q", "ma a q", mcproto.MetaReply{Status: hit, Value: []byte("5")}, ""},
	{"ma q VA", "ma a q v c", mcproto.MetaReply{Status: hit, Value: []byte("5")}, ""},
	{"ma q created", "ma a q N0 v", mcproto.MetaReply{Status: hit, Value: []byte("0"), Created: true}, "VA 1\r\n0\r\n"},
	{"ma NF", "ma a q O1 k c t v", mcproto.MetaReply{Status: miss}, "NF O1 ka\r\n"},
	{"ma EX", "ma a C1", mcproto.MetaReply{Status: exists}, "EX\r\n"},
	{"ma NS", "ma a N0 k", mcproto.MetaReply{Status: notStord}, "NS ka\r\n"},
	{"ma b64", "ma Zm9v b k", mcproto.MetaReply{Status: hit, Value: []byte("1")}, "HD kZm9v b\r\n"},

	// me.
	{"me", "me a", mcproto.MetaReply{Status: hit, TTL: -1, LastAccess: 3, CAS: 5, Size: 60},
		"ME a exp=-1 la=3 cas=5 fetch=no cls=1 size=60\r\n"},
	{"me fetched", "me a", mcproto.MetaReply{Status: hit, TTL: 10, Fetched: true, Size: 1},
		"ME a exp=10 la=0 cas=0 fetch=yes cls=1 size=1\r\n"},
	{"me b64", "me Zm9v b", mcproto.MetaReply{Status: hit, TTL: -1, Size: 61}, "ME Zm9v exp=-1 la=0 cas=0 fetch=no cls=1 size=61\r\n"},
	{"me EN", "me a", mcproto.MetaReply{Status: miss}, "EN\r\n"},
	{"me q is no flag", "me a q", mcproto.MetaReply{Status: miss}, "EN\r\n"},

	// mn, and outcomes a command does not have.
	{"mn", "mn", mcproto.MetaReply{}, "MN\r\n"},
	{"mg stored", "mg a", mcproto.MetaReply{Status: stored}, "SERVER_ERROR unexpected meta reply 1 to mg\r\n"},
	{"ms hit", "ms a 1", mcproto.MetaReply{Status: hit}, "SERVER_ERROR unexpected meta reply 11 to ms\r\n"},
	{"md hit", "md a q", mcproto.MetaReply{Status: hit}, "SERVER_ERROR unexpected meta reply 11 to md\r\n"},
	{"ma deleted", "ma a", mcproto.MetaReply{Status: deleted}, "SERVER_ERROR unexpected meta reply 5 to ma\r\n"},
	{"me stored", "me a", mcproto.MetaReply{Status: stored}, "SERVER_ERROR unexpected meta reply 1 to me\r\n"},
}

func TestAppendMeta(t *testing.T) {
	var c Codec
	for _, tt := range metaReplyTests {
		e := metaEcho(t, tt.req)
		assert.Equal(t, tt.want, string(c.AppendMeta(nil, e, &tt.r)), tt.name)
		// Appending keeps what dst held.
		assert.Equal(t, "x"+tt.want, string(c.AppendMeta([]byte("x"), e, &tt.r)), tt.name)
	}
}

// TestMetaStatusAndErrors: mn through AppendStatus is MN, and an error is
// shown to a quiet meta request.
func TestMetaStatusAndErrors(t *testing.T) {
	var c Codec
	assert.Equal(t, "MN\r\n", string(c.AppendStatus(nil, metaEcho(t, "mn"), mcproto.StatusNoop, 0)))
	for _, line := range []string{"mg a q", "ms a 1 q", "md a q", "ma a q"} {
		e := metaEcho(t, line)
		require.True(t, e.Quiet, line)
		assert.Equal(t, "CLIENT_ERROR bad data chunk\r\n", string(c.AppendError(nil, e, mcproto.KindClient, "bad data chunk")), line)
		assert.Equal(t, MsgNonNumericValue+"\r\n", string(c.AppendError(nil, e, mcproto.KindNonNumeric, "")), line)
		assert.Equal(t, "SERVER_ERROR no quorum\r\n", string(c.AppendError(nil, e, mcproto.KindServer, "no quorum")), line)
		assert.Equal(t, MsgObjectTooLarge+"\r\n", string(c.AppendError(nil, e, mcproto.KindTooLarge, "")), line)
	}
}

// TestAppendMetaNoEcho: a reply without its echo renders the bare code
// rather than failing.
func TestAppendMetaNoEcho(t *testing.T) {
	var c Codec
	e := mcproto.Echo{Proto: mcproto.Meta, Op: mcproto.OpMetaGet}
	assert.Equal(t, "HD\r\n", string(c.AppendMeta(nil, e, &mcproto.MetaReply{Status: hit})))
	e.Op = mcproto.OpNoop
	assert.Equal(t, "MN\r\n", string(c.AppendMeta(nil, e, &mcproto.MetaReply{})))
}

func TestAppendMetaDoesNotAllocate(t *testing.T) {
	var c Codec
	dst := make([]byte, 0, 4096)
	get := metaEcho(t, "mg Zm9vYmFy b s v t c f l h k O123")
	arith := metaEcho(t, "ma a v t c k O1")
	r := mcproto.MetaReply{Status: hit, Value: []byte("some value"), CAS: 99, TTL: 100, Size: 10, Stale: true, Won: true}
	allocs := testing.AllocsPerRun(100, func() {
		d := c.AppendMeta(dst[:0], get, &r)
		_ = c.AppendMeta(d, arith, &r)
	})
	assert.Zero(t, allocs)
}

// TestAppendMetaGrowsOnce: from an empty dst, a reply takes one allocation
// however many tokens it renders.
func TestAppendMetaGrowsOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under -race are the instrumentation's")
	}
	var c Codec
	e := metaEcho(t, "mg "+strings.Repeat("QUJD", 62)+" b s v t c f l h k O"+strings.Repeat("9", 31))
	r := mcproto.MetaReply{Status: hit, Value: make([]byte, 1000), CAS: 1<<64 - 1, TTL: 1<<31 - 1, Size: 1000,
		Flags: 1<<32 - 1, LastAccess: 1<<31 - 1, TokenSent: true, Stale: true, Won: true}
	allocs := testing.AllocsPerRun(100, func() { _ = c.AppendMeta(nil, e, &r) })
	assert.Equal(t, 1.0, allocs)
}
