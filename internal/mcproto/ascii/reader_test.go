package ascii

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/kvd-project/kvd/internal/mcproto"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// render describes one result of Next in a compact, stable form used by the
// tables below:
//
//	set k=a f=5 e=-1 d="xy" noreply     a request (zero fields omitted)
//	ERR "CLIENT_ERROR bad data chunk"    an *mcproto.Error answered, connection kept
//	ERR ""                               an *mcproto.Error suppressed by noreply
//	CLOSE                                an *mcproto.Error that closes silently
//	EOF / UNEXPECTED_EOF                 the stream ended
func render(req *mcproto.Request, err error) string {
	if err != nil {
		var pe *mcproto.Error
		switch {
		case errors.As(err, &pe):
			s := "ERR " + strconv.Quote(replyLine(pe))
			if pe.Close {
				s = "CLOSE"
				if replyLine(pe) != "" {
					s += " " + strconv.Quote(replyLine(pe))
				}
			}
			if pe.TooLarge {
				s += fmt.Sprintf(" toolarge %s k=%s", req.Op, req.Keys[0])
			}
			return s
		case err == io.EOF:
			return "EOF"
		case err == io.ErrUnexpectedEOF:
			return "UNEXPECTED_EOF"
		default:
			return "IOERR " + err.Error()
		}
	}
	if req.Echo.Proto == mcproto.Meta {
		return renderMeta(req)
	}
	var b strings.Builder
	b.WriteString(req.Op.String())
	for _, k := range req.Keys {
		fmt.Fprintf(&b, " k=%s", k)
	}
	if req.Flags != 0 {
		fmt.Fprintf(&b, " f=%d", req.Flags)
	}
	if req.Exptime != 0 {
		fmt.Fprintf(&b, " e=%d", req.Exptime)
	}
	if req.CAS != 0 {
		fmt.Fprintf(&b, " cas=%d", req.CAS)
	}
	if req.Delta != 0 {
		fmt.Fprintf(&b, " delta=%d", req.Delta)
	}
	if req.HasDelay {
		fmt.Fprintf(&b, " delay=%d", req.Delay)
	}
	if req.Op == mcproto.OpVerbosity {
		fmt.Fprintf(&b, " level=%d", req.Verbosity)
	}
	for _, a := range req.Args {
		fmt.Fprintf(&b, " arg=%s", a)
	}
	if req.Op.IsStorage() {
		fmt.Fprintf(&b, " d=%q", req.Data)
	}
	if req.Echo.Noreply {
		b.WriteString(" noreply")
	}
	return b.String()
}

// parseAll runs Next until EOF, an I/O error or a closing error.
func parseAll(t testing.TB, r io.Reader, lim mcproto.Limits) []string {
	t.Helper()
	pr := NewReader(r, lim)
	var out []string
	var req mcproto.Request
	for range 10000 {
		err := pr.Next(&req)
		out = append(out, render(&req, err))
		var pe *mcproto.Error
		if err != nil && (!errors.As(err, &pe) || pe.Close) {
			return out
		}
	}
	t.Fatal("parser made no progress")
	return nil
}

// readers yields the same input split in different ways: whole, one byte
// per Read, half of each Read, and with the EOF delivered with the data.
func readers(in string) map[string]io.Reader {
	return map[string]io.Reader{
		"whole":   strings.NewReader(in),
		"onebyte": iotest.OneByteReader(strings.NewReader(in)),
		"half":    iotest.HalfReader(strings.NewReader(in)),
		"dataerr": iotest.DataErrReader(strings.NewReader(in)),
	}
}

var k250 = strings.Repeat("k", 250)
var k251 = strings.Repeat("k", 251)

// The expected results were checked against memcached 1.6.18: each input was
// sent to the real server and its replies matched to these parses (see
// internal/testing/compat for the same cases as wire exchanges).
var parseTests = []struct {
	name string
	in   string
	want []string
}{
	// Retrieval.
	{"get", "get a\r\n", []string{"get k=a", "EOF"}},
	{"get bare LF", "get a\n", []string{"get k=a", "EOF"}},
	{"get many", "get a b  c\r\n", []string{"get k=a k=b k=c", "EOF"}},
	{"get spaces", "  get   a   \r\n", []string{"get k=a", "EOF"}},
	{"gets", "gets a b\r\n", []string{"gets k=a k=b", "EOF"}},
	{"bget is get", "bget a\r\n", []string{"get k=a", "EOF"}},
	{"get no key", "get\r\nget \r\ngets\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"get 250", "get " + k250 + "\r\n", []string{"get k=" + k250, "EOF"}},
	{"get 251", "get " + k251 + "\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},
	{"get 251 second", "get a " + k251 + "\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},
	{"get 30 keys", "get " + strings.TrimSpace(strings.Repeat("x ", 30)) + "\r\n", []string{"get" + strings.Repeat(" k=x", 30), "EOF"}},
	{"key with tab and CR", "get a\tb c\rd\r\n", []string{"get k=a\tb k=c\rd", "EOF"}},
	{"NUL ends the line", "get a\x00b c\r\n", []string{"get k=a", "EOF"}},
	{"CR NUL", "get a\r\x00\r\n", []string{"get k=a\r", "EOF"}},
	{"gat", "gat 10 a b\r\n", []string{"gat k=a k=b e=10", "EOF"}},
	{"gats", "gats -1 a\r\n", []string{"gats k=a e=-1", "EOF"}},
	{"gat no key", "gat 10\r\n", []string{"gat e=10", "EOF"}},
	{"gat bare", "gat\r\n", []string{`ERR "ERROR"`, "EOF"}},
	{"gat bad exptime", "gat x a\r\n", []string{`ERR "CLIENT_ERROR invalid exptime argument"`, "EOF"}},
	{"gat long key", "gat 10 " + k251 + "\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},
	{"gat exptime 32-bit", "gat 4294967295 a\r\n", []string{"gat k=a e=-1", "EOF"}},

	// Storage.
	{"set", "set a 5 0 3\r\nxyz\r\n", []string{`set k=a f=5 d="xyz"`, "EOF"}},
	{"set empty", "set a 0 0 0\r\n\r\n", []string{`set k=a d=""`, "EOF"}},
	{"set binary", "set a 0 0 4\r\n\r\n\x00\n\r\n", []string{"set k=a d=\"\\r\\n\\x00\\n\"", "EOF"}},
	{"set bare LF line", "set a 0 0 1\nx\r\n", []string{`set k=a d="x"`, "EOF"}},
	{"set noreply", "set a 0 0 1 noreply\r\nx\r\n", []string{`set k=a d="x" noreply`, "EOF"}},
	{"set other 6th token", "set a 0 0 1 foo\r\nx\r\n", []string{`set k=a d="x"`, "EOF"}},
	{"add", "add a 1 2 1\r\nx\r\n", []string{`add k=a f=1 e=2 d="x"`, "EOF"}},
	{"replace", "replace a 0 0 1\r\nx\r\n", []string{`replace k=a d="x"`, "EOF"}},
	{"append", "append a 0 0 1\r\nx\r\n", []string{`append k=a d="x"`, "EOF"}},
	{"prepend", "prepend a 0 0 1 noreply\r\nx\r\n", []string{`prepend k=a d="x" noreply`, "EOF"}},
	{"cas", "cas a 0 0 1 99\r\nx\r\n", []string{`cas k=a cas=99 d="x"`, "EOF"}},
	{"cas max", "cas a 0 0 1 18446744073709551615 noreply\r\nx\r\n", []string{`cas k=a cas=18446744073709551615 d="x" noreply`, "EOF"}},
	{"cas 7th token", "cas a 0 0 1 1 2\r\nx\r\n", []string{`cas k=a cas=1 d="x"`, "EOF"}},
	{"flags max", "set a 4294967295 0 1\r\nx\r\n", []string{`set k=a f=4294967295 d="x"`, "EOF"}},
	{"flags wrap 2^32", "set a 4294967296 0 1\r\nx\r\n", []string{`set k=a d="x"`, "EOF"}},
	{"exptime wrap", "set a 0 4294967295 1\r\nx\r\n", []string{`set k=a e=-1 d="x"`, "EOF"}},
	{"exptime negative", "set a 0 -1 1\r\nx\r\n", []string{`set k=a e=-1 d="x"`, "EOF"}},
	{"exptime absolute", "set a 0 1700000000 1\r\nx\r\n", []string{`set k=a e=1700000000 d="x"`, "EOF"}},
	{"bytes wrap", "set a 0 0 4294967297\r\nx\r\n", []string{`set k=a d="x"`, "EOF"}},
	{"plus and minus zero", "set a +0 -0 +1\r\nx\r\n", []string{`set k=a d="x"`, "EOF"}},
	{"leading zero", "set a 0 0 01\r\nx\r\n", []string{`set k=a d="x"`, "EOF"}},
	{"number then tab", "set a 0 0 1\tjunk\r\nx\r\n", []string{`set k=a d="x"`, "EOF"}},
	{"number then CR", "set a 0 0 1\r\r\nx\r\n", []string{`set k=a d="x"`, "EOF"}},
	{"key 250", "set " + k250 + " 0 0 1\r\nx\r\n", []string{"set k=" + k250 + ` d="x"`, "EOF"}},
	{"pipelined", "set a 0 0 1\r\nx\r\nget a\r\nset b 0 0 2\r\nyz\r\ndelete a\r\n",
		[]string{`set k=a d="x"`, "get k=a", `set k=b d="yz"`, "delete k=a", "EOF"}},

	// Storage errors. A rejected line leaves its data block to be read as a
	// command line, as memcached does.
	{"set few tokens", "set a 0 0\r\n", []string{`ERR "ERROR"`, "EOF"}},
	{"set too many tokens", "set a 0 0 1 noreply extra\r\nx\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"set tab separator", "set a\t0 0 1\r\nx\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"cas no unique", "cas a 0 0 1\r\nx\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"key 251", "set " + k251 + " 0 0 1\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"key 251 noreply", "set " + k251 + " 0 0 1 noreply\r\nx\r\n", []string{`ERR ""`, `ERR "ERROR"`, "EOF"}},
	{"bad flags", "set a x 0 1\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"negative flags", "set a -1 0 1\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"hex flags", "set a 0x1 0 1\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"bad exptime", "set a 0 x 1\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"bad bytes", "set a 0 0 x\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"negative bytes", "set a 0 0 -1\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"bytes INT_MAX-1", "set a 0 0 2147483646\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},
	{"bad cas", "cas a 0 0 1 x\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"negative cas", "cas a 0 0 1 -1\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"cas 2^64", "cas a 0 0 1 18446744073709551616\r\nx\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"noreply as bytes", "set a 0 0 noreply\r\nx\r\n", []string{`ERR ""`, `ERR "ERROR"`, "EOF"}},
	{"bad data chunk", "set a 0 0 1\r\nxy\r\nget a\r\n", []string{`ERR "CLIENT_ERROR bad data chunk"`, `ERR "ERROR"`, "get k=a", "EOF"}},
	{"bad data chunk long", "set a 0 0 3\r\nabcde\r\n", []string{`ERR "CLIENT_ERROR bad data chunk"`, `ERR "ERROR"`, "EOF"}},
	{"bad data chunk noreply", "set a 0 0 1 noreply\r\nxyz\r\n", []string{`ERR ""`, `ERR "ERROR"`, "EOF"}},
	{"bad data chunk LF only", "set a 0 0 1\r\nx\nget a\r\n", []string{`ERR "CLIENT_ERROR bad data chunk"`, `ERR "ERROR"`, "EOF"}},
	{"too large", "set a 0 0 20\r\n01234567890123456789\r\nget a\r\n",
		[]string{`ERR "SERVER_ERROR object too large for cache" toolarge set k=a`, "get k=a", "EOF"}},
	{"too large noreply", "set a 0 0 20 noreply\r\n01234567890123456789\r\nget a\r\n",
		[]string{`ERR "" toolarge set k=a`, "get k=a", "EOF"}},
	{"too large junk terminator", "append a 0 0 20\r\n01234567890123456789XXget a\r\n",
		[]string{`ERR "SERVER_ERROR object too large for cache" toolarge append k=a`, "get k=a", "EOF"}},
	{"too large at the limit", "set a 0 0 16\r\n0123456789abcdef\r\nset a 0 0 17\r\n0123456789abcdefg\r\n",
		[]string{`set k=a d="0123456789abcdef"`, `ERR "SERVER_ERROR object too large for cache" toolarge set k=a`, "EOF"}},
	{"too large cut short", "set a 0 0 20\r\n0123", []string{`ERR "SERVER_ERROR object too large for cache" toolarge set k=a`, "UNEXPECTED_EOF"}},
	{"data cut short", "set a 0 0 5\r\nabc", []string{"UNEXPECTED_EOF"}},
	{"data without terminator", "set a 0 0 3\r\nabc", []string{"UNEXPECTED_EOF"}},

	// incr, decr.
	{"incr", "incr a 5\r\n", []string{"incr k=a delta=5", "EOF"}},
	{"decr noreply", "decr a 1 noreply\r\n", []string{"decr k=a delta=1 noreply", "EOF"}},
	{"incr max", "incr a 18446744073709551615\r\n", []string{"incr k=a delta=18446744073709551615", "EOF"}},
	{"incr plus", "incr a +5\r\n", []string{"incr k=a delta=5", "EOF"}},
	{"incr bad", "incr a x\r\nincr a -1\r\nincr a 1x\r\nincr a 18446744073709551616\r\n", []string{
		`ERR "CLIENT_ERROR invalid numeric delta argument"`, `ERR "CLIENT_ERROR invalid numeric delta argument"`,
		`ERR "CLIENT_ERROR invalid numeric delta argument"`, `ERR "CLIENT_ERROR invalid numeric delta argument"`, "EOF"}},
	{"incr bad noreply", "incr a x noreply\r\n", []string{`ERR ""`, "EOF"}},
	{"incr tokens", "incr a\r\nincr a 1 2 3\r\ndecr\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"incr long key", "incr " + k251 + " x\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},
	{"incr 4th token", "incr a 1 2\r\n", []string{"incr k=a delta=1", "EOF"}},
	// memcached's safe_strtoul/safe_strtoull refuse a number of 2^63 or
	// more when a '-' is anywhere in the token (strchr), even after the
	// digits and a tab; below 2^63 the '-' is ignored.
	{"big number then minus", "incr a 9223372036854775808\t-\r\nincr a 1\t-\r\n" +
		"set a 9223372036854775808\t- 0 1\r\nx\r\ncas a 0 0 1 18446744073709551615\tx-\r\nx\r\nverbosity 9223372036854775808\t-\r\n",
		[]string{`ERR "CLIENT_ERROR invalid numeric delta argument"`, "incr k=a delta=1",
			`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`,
			`ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`,
			`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},

	// touch.
	{"touch", "touch a 10\r\ntouch a -1 noreply\r\n", []string{"touch k=a e=10", "touch k=a e=-1 noreply", "EOF"}},
	{"touch bad", "touch a x\r\ntouch a\r\n", []string{`ERR "CLIENT_ERROR invalid exptime argument"`, `ERR "ERROR"`, "EOF"}},
	{"touch long key", "touch " + k251 + " 1\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},

	// delete.
	{"delete", "delete a\r\ndelete a 0\r\ndelete a noreply\r\ndelete a 0 noreply\r\n",
		[]string{"delete k=a", "delete k=a", "delete k=a noreply", "delete k=a noreply", "EOF"}},
	{"delete noreply as key", "delete noreply\r\n", []string{"delete k=noreply", "EOF"}},
	{"delete usage", "delete a 1\r\ndelete a x\r\ndelete a 0 0\r\ndelete a 1 noreply\r\n", []string{
		`ERR "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"`,
		`ERR "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"`,
		`ERR "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"`,
		`ERR ""`, "EOF"}},
	{"delete tokens", "delete\r\ndelete a 0 noreply x\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"delete long key", "delete " + k251 + "\r\n", []string{`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},

	// flush_all, verbosity, version, stats, quit.
	{"flush_all", "flush_all\r\nflush_all 0\r\nflush_all -5\r\nflush_all noreply\r\nflush_all 10 noreply\r\nflush_all 7 x\r\n",
		[]string{"flush_all", "flush_all delay=0", "flush_all delay=-5", "flush_all noreply", "flush_all delay=10 noreply", "flush_all delay=7", "EOF"}},
	{"flush_all bad", "flush_all x\r\nflush_all x noreply\r\nflush_all noreply 0\r\nflush_all 1 2 3\r\n", []string{
		`ERR "CLIENT_ERROR invalid exptime argument"`, `ERR ""`, `ERR "CLIENT_ERROR invalid exptime argument"`, `ERR "ERROR"`, "EOF"}},
	{"verbosity", "verbosity 1\r\nverbosity 0 noreply\r\nverbosity 2 x\r\n",
		[]string{"verbosity level=1", "verbosity level=0 noreply", "verbosity level=2", "EOF"}},
	{"verbosity bad", "verbosity\r\nverbosity x\r\nverbosity noreply\r\nverbosity -1\r\nverbosity 1 2 3\r\n", []string{
		`ERR "ERROR"`, `ERR "CLIENT_ERROR bad command line format"`, `ERR ""`, `ERR "CLIENT_ERROR bad command line format"`, `ERR "ERROR"`, "EOF"}},
	{"version", "version\r\nversion extra\r\n", []string{"version", "version", "EOF"}},
	{"stats", "stats\r\nstats items\r\nstats detail dump\r\n", []string{"stats", "stats arg=items", "stats arg=detail arg=dump", "EOF"}},
	{"quit", "quit\r\nquit now\r\n", []string{"quit", "quit", "EOF"}},

	// Unknown commands, HTTP.
	{"unknown", "foo\r\nGET a\r\nSet a 0 0 1\r\nsetx\r\nmx\r\nmgx a v\r\n", []string{
		`ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"empty lines", "\r\n\n \r\n\r\r\ng\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"unsupported admin", "shutdown\r\nslabs reassign 1 2\r\nlru_crawler metadump all\r\nwatch\r\ncache_memlimit 100\r\nshutdown graceful noreply\r\n", []string{
		`ERR "ERROR: shutdown not enabled"`, `ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR"`, `ERR "ERROR: shutdown not enabled"`, "EOF"}},
	{"http", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", []string{"CLOSE"}},
	{"http post", "POST /x HTTP/1.0\r\n", []string{"CLOSE"}},
	{"http bare", "HTTP/1.1\r\n", []string{"CLOSE"}},
	{"http prefix only", "foo HTTP/\r\n", []string{"CLOSE"}},
	{"http lowercase", "foo http/1.1\r\n", []string{`ERR "ERROR"`, "EOF"}},
	{"http lowercase get is a get", "get / HTTP/1.1\r\n", []string{"get k=/ k=HTTP/1.1", "EOF"}},
	{"http after known letter", "gx / HTTP/1.1\r\nsx HTTP/1.1\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	{"http 23rd token", "XX " + strings.Repeat("a ", 21) + "HTTP/1.1 b\r\n", []string{"CLOSE"}},
	{"http 24th token", "XX " + strings.Repeat("a ", 22) + "HTTP/1.1\r\n", []string{`ERR "ERROR"`, "EOF"}},

	// Stream ends.
	{"empty", "", []string{"EOF"}},
	{"partial line", "get a", []string{"UNEXPECTED_EOF"}},
}

func TestParse(t *testing.T) {
	lim := mcproto.Limits{MaxItemSize: 16}
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			for how, r := range readers(tt.in) {
				assert.Equal(t, tt.want, parseAll(t, r, lim), how)
			}
		})
	}
}

func TestLineLimits(t *testing.T) {
	lim := mcproto.Limits{MaxLine: 2048, MaxMultigetLine: 8192}
	long := func(prefix string, n int) string { // a line of exactly n bytes
		return prefix + strings.Repeat("k", n-len(prefix))
	}
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"line at MaxLine", long("foo ", 2048) + "\r\n", []string{`ERR "ERROR"`, "EOF"}},
		{"line at MaxLine LF", long("foo ", 2048) + "\n", []string{`ERR "ERROR"`, "EOF"}},
		{"line over MaxLine", long("foo ", 2049) + "\n", []string{"CLOSE"}},
		{"line over MaxLine CR", long("foo ", 2049) + "\r\n", []string{"CLOSE"}},
		{"line of CRs", long("foo ", 2048) + "\r\r\n", []string{"CLOSE"}},
		{"no newline", long("set ", 5000), []string{"CLOSE"}},
		{"no newline just over", long("set ", 2050), []string{"CLOSE"}},
		{"no newline at limit", long("set ", 2049), []string{"UNEXPECTED_EOF"}},
		{"set line over MaxLine", long("set ", 3000) + " 0 0 1\r\nx\r\n", []string{"CLOSE"}},
		{"multiget", "get " + strings.Repeat("abcdefg ", 900) + "\r\n", []string{"get" + strings.Repeat(" k=abcdefg", 900), "EOF"}},
		{"multiget gat", "gat 1 " + strings.Repeat("abcdefg ", 900) + "\r\n", []string{"gat" + strings.Repeat(" k=abcdefg", 900) + " e=1", "EOF"}},
		{"multiget leading spaces", strings.Repeat(" ", 100) + "gets " + strings.Repeat("abcdefg ", 900) + "\r\n", []string{"gets" + strings.Repeat(" k=abcdefg", 900), "EOF"}},
		{"multiget too many spaces", strings.Repeat(" ", 101) + "gets " + strings.Repeat("abcdefg ", 900) + "\r\n", []string{"CLOSE"}},
		{"multiget at limit", long("get ", 8192) + "\n", []string{`ERR "CLIENT_ERROR bad command line format"`, "EOF"}},
		{"multiget over limit", long("get ", 8193) + "\n", []string{"CLOSE"}},
		{"multiget no newline", long("get ", 9000), []string{"CLOSE"}},
		{"get without space", long("get", 3000) + "\n", []string{"CLOSE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for how, r := range readers(tt.in) {
				assert.Equal(t, tt.want, parseAll(t, r, lim), how)
			}
		})
	}
}

func TestErrorIsSticky(t *testing.T) {
	pr := NewReader(strings.NewReader("GET / HTTP/1.1\r\nget a\r\n"), mcproto.Limits{})
	var req mcproto.Request
	err1 := pr.Next(&req)
	err2 := pr.Next(&req)
	var pe *mcproto.Error
	require.ErrorAs(t, err1, &pe)
	assert.True(t, pe.Close)
	assert.Empty(t, replyLine(pe))
	assert.Same(t, err1, err2)
}

func TestReadErrorAfterData(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("get a\r\nget b"), iotest.ErrReader(boom))
	pr := NewReader(r, mcproto.Limits{})
	var req mcproto.Request
	require.NoError(t, pr.Next(&req))
	assert.Equal(t, "get k=a", render(&req, nil))
	assert.ErrorIs(t, pr.Next(&req), boom)
	assert.ErrorIs(t, pr.Next(&req), boom)
}

// zeroReader never makes progress.
type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestNoProgress(t *testing.T) {
	pr := NewReader(zeroReader{}, mcproto.Limits{})
	var req mcproto.Request
	assert.ErrorIs(t, pr.Next(&req), io.ErrNoProgress)
}

func TestBuffered(t *testing.T) {
	in := "get a\r\nget b\r\n"
	pr := NewReader(strings.NewReader(in), mcproto.Limits{})
	var req mcproto.Request
	assert.Equal(t, 0, pr.Buffered())
	require.NoError(t, pr.Next(&req))
	assert.Equal(t, len("get b\r\n"), pr.Buffered())
	require.NoError(t, pr.Next(&req))
	assert.Equal(t, 0, pr.Buffered())
}

// TestBufferedTooLarge: the bytes of a rejected value are not "pending
// requests", so a server flushes the SERVER_ERROR before Next blocks reading
// the rest of the value.
func TestBufferedTooLarge(t *testing.T) {
	in := "set a 0 0 100\r\n" + strings.Repeat("x", 50)
	pr := NewReader(strings.NewReader(in), mcproto.Limits{MaxItemSize: 10})
	var req mcproto.Request
	err := pr.Next(&req)
	var pe *mcproto.Error
	require.ErrorAs(t, err, &pe)
	assert.True(t, pe.TooLarge)
	assert.Equal(t, 0, pr.Buffered())

	in = "set a 0 0 4\r\n" + "xxxx\r\nget a\r\n"
	pr = NewReader(strings.NewReader(in), mcproto.Limits{MaxItemSize: 1})
	require.ErrorAs(t, pr.Next(&req), &pe)
	assert.Equal(t, len("get a\r\n"), pr.Buffered())
}

// phaseReader serves one chunk per Read and records the Reader's mcproto.Phase at
// each Read, as the server's `stats conns` reads it.
type phaseReader struct {
	chunks []string
	pr     *Reader
	phases []mcproto.Phase
}

func (p *phaseReader) Read(b []byte) (int, error) {
	p.phases = append(p.phases, p.pr.Phase())
	if len(p.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.chunks[0])
	p.chunks = p.chunks[1:]
	return n, nil
}

// TestPhase: a Read made for a line, for the rest of a data block (small
// or larger than the read buffer) and for the rest of a value too large is
// told apart.
func TestPhase(t *testing.T) {
	big := strings.Repeat("x", 2*initialBufSize)
	src := &phaseReader{chunks: []string{
		"get a", "\r\nset a 0 0 3\r\nx", "y", "z\r\n",
		"set b 0 0 " + strconv.Itoa(len(big)) + "\r\n", big[:10], big[10:] + "\r\n",
		"set c 0 0 100\r\nxx", strings.Repeat("x", 98), "\r\nget c\r\n",
	}}
	pr := NewReader(src, mcproto.Limits{MaxItemSize: 3 * initialBufSize})
	src.pr = pr
	var req mcproto.Request
	require.NoError(t, pr.Next(&req)) // get a
	require.NoError(t, pr.Next(&req)) // set a
	require.NoError(t, pr.Next(&req)) // set b
	assert.Equal(t, big, string(req.Data))
	pr.lim.MaxItemSize = 10
	var pe *mcproto.Error
	require.ErrorAs(t, pr.Next(&req), &pe) // set c: too large
	require.NoError(t, pr.Next(&req))      // get c
	assert.Equal(t, mcproto.PhaseLine, pr.Phase())
	assert.ErrorIs(t, pr.Next(&req), io.EOF)
	assert.Equal(t, []mcproto.Phase{
		mcproto.PhaseLine, mcproto.PhaseLine, // get a
		mcproto.PhaseValue, mcproto.PhaseValue, // set a's block
		mcproto.PhaseLine, mcproto.PhaseValue, mcproto.PhaseValue, // set b's line, then its big block
		mcproto.PhaseLine, mcproto.PhaseSwallow, mcproto.PhaseSwallow, // set c's line, then its rest
		mcproto.PhaseLine, // EOF
	}, src.phases)
}

// countingReader serves n bytes of a repeated pattern and counts them, to
// check that a huge declared value is streamed, not buffered.
type countingReader struct {
	pattern []byte
	left    int
	off     int
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && c.left > 0 {
		k := copy(p[n:min(len(p), n+c.left)], c.pattern[c.off:])
		c.off = (c.off + k) % len(c.pattern)
		n += k
		c.left -= k
	}
	return n, nil
}

func TestTooLargeIsStreamed(t *testing.T) {
	const size = 1 << 28 // 256 MiB declared and sent
	head := "set big 0 0 " + strconv.Itoa(size) + "\r\n"
	r := io.MultiReader(strings.NewReader(head), &countingReader{pattern: bytes.Repeat([]byte("x"), 64<<10), left: size},
		strings.NewReader("\r\nget big\r\n"))
	pr := NewReader(r, mcproto.Limits{})
	var req mcproto.Request
	var pe *mcproto.Error
	require.ErrorAs(t, pr.Next(&req), &pe)
	assert.Equal(t, MsgObjectTooLarge, replyLine(pe))
	assert.True(t, pe.TooLarge)
	assert.Equal(t, mcproto.OpSet, req.Op)
	assert.Equal(t, "big", string(req.Keys[0]))

	require.NoError(t, pr.Next(&req))
	assert.Equal(t, "get k=big", render(&req, nil))
	assert.LessOrEqual(t, len(pr.buf), initialBufSize, "read buffer grew while swallowing")
	assert.Nil(t, pr.data)
}

// TestLargeValue: values larger than the read buffer, read whole, split and
// pipelined, come back intact; the big buffer is released afterwards.
func TestLargeValue(t *testing.T) {
	for _, size := range []int{initialBufSize - 20, initialBufSize, initialBufSize + 1, 100 << 10, 1 << 20} {
		val := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		in := "set a 0 0 " + strconv.Itoa(size) + "\r\n" + string(val) + "\r\nget a\r\n"
		for how, r := range readers(in) {
			if how == "onebyte" && size > 100<<10 {
				continue // slow, and nothing new
			}
			pr := NewReader(r, mcproto.Limits{})
			var req mcproto.Request
			require.NoError(t, pr.Next(&req), how)
			require.Equal(t, mcproto.OpSet, req.Op)
			require.Equal(t, val, req.Data, "%s size %d", how, size)
			require.NoError(t, pr.Next(&req), how)
			assert.Equal(t, "get k=a", render(&req, nil))
			assert.LessOrEqual(t, cap(pr.data), retainSize)
		}
	}
}

// TestMultigetReleasesBuffer: a long multiget grows the read buffer and
// the token slice; the next request shrinks both back. The tokens were once
// kept: a 1 MiB line of one-byte keys left 12.6 MiB on an idle connection.
func TestMultigetReleasesBuffer(t *testing.T) {
	for _, key := range []string{"abcdefgh", "a"} {
		nkeys := (mcproto.DefaultMaxMultigetLine - 8) / (len(key) + 1)
		in := "get " + strings.Repeat(key+" ", nkeys) + "\r\nget b\r\n"
		pr := NewReader(strings.NewReader(in), mcproto.Limits{})
		var req mcproto.Request
		require.NoError(t, pr.Next(&req))
		assert.Len(t, req.Keys, nkeys)
		assert.Greater(t, len(pr.buf), retainSize)
		require.NoError(t, pr.Next(&req))
		assert.Equal(t, "get k=b", render(&req, nil))
		assert.LessOrEqual(t, len(pr.buf), retainSize)
		assert.LessOrEqual(t, cap(pr.words)*int(unsafe.Sizeof([]byte(nil))), retainSize, "%d tokens kept", cap(pr.words))
	}
}

// TestStorageKeySurvivesRefill: the key of a storage command must not be
// overwritten when the data block is read over the line's bytes.
func TestStorageKeySurvivesRefill(t *testing.T) {
	val := strings.Repeat("v", initialBufSize-100)
	in := "set thekey 0 0 " + strconv.Itoa(len(val)) + "\r\n" + val + "\r\n"
	pr := NewReader(iotest.HalfReader(strings.NewReader("get "+strings.Repeat("p", 200)+"\r\n"+in)), mcproto.Limits{})
	var req mcproto.Request
	require.NoError(t, pr.Next(&req))
	require.NoError(t, pr.Next(&req))
	assert.Equal(t, "thekey", string(req.Keys[0]))
	assert.Equal(t, val, string(req.Data))
}

func TestDefaults(t *testing.T) {
	pr := NewReader(strings.NewReader(""), mcproto.Limits{MaxLine: 4096, MaxMultigetLine: 100})
	assert.Equal(t, mcproto.Limits{MaxItemSize: mcproto.DefaultMaxItemSize, MaxLine: 4096, MaxMultigetLine: 4096}, pr.lim)
	assert.Equal(t, mcproto.Limits{MaxItemSize: 1 << 20, MaxLine: 2048, MaxMultigetLine: 1 << 20}, NewReader(nil, mcproto.Limits{}).lim)
}

func TestMultigetPrefix(t *testing.T) {
	for in, want := range map[string]tristate{
		"get a": yes, "gets a": yes, "gat 1 a": yes, "gats 1 a": yes, "   get a": yes,
		strings.Repeat(" ", 100) + "get a": yes, strings.Repeat(" ", 101) + "get a": no,
		"": maybe, "   ": maybe, "g": maybe, "ge": maybe, "get": maybe, "gat": maybe, "gets": maybe,
		"getx": no, "set a": no, "get\ta": no, "GET a": no, "ga": maybe, "gax": no,
	} {
		assert.Equal(t, want, multigetPrefix([]byte(in)), "%q", in)
	}
}

// TestBinaryMagicOnlyOpensAConnection: memcached picks the protocol from a
// connection's first byte; later, a line that happens to start with 0x80
// (a value's bytes read as commands after a wrong byte count, a pickled
// value starting with 0x80) is a text line like any other, answered ERROR.
// kvd used to take it for a binary header there too: it waited for 24 bytes
// that never came, then closed the connection.
func TestBinaryMagicOnlyOpensAConnection(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"after a request", "version\r\n\x80abc\r\nget a\r\n", []string{"version", `ERR "ERROR"`, "get k=a", "EOF"}},
		{"after a bad data chunk", "set a 0 0 2\r\nabc\r\n\x80\x02}q\x00.\r\nget a\r\n",
			[]string{`ERR "CLIENT_ERROR bad data chunk"`, `ERR "ERROR"`, `ERR "ERROR"`, "get k=a", "EOF"}},
		{"after an error", "bogus\r\n\x80\r\n", []string{`ERR "ERROR"`, `ERR "ERROR"`, "EOF"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for how, r := range readers(tt.in) {
				assert.Equal(t, tt.want, parseAll(t, r, mcproto.Limits{}), how)
			}
		})
	}
}

// replyLine is the reply of a parse error as a line without its "\r\n".
func replyLine(pe *mcproto.Error) string {
	return strings.TrimSuffix(string(pe.Reply), "\r\n")
}
