package ascii

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// renderMeta describes a meta request for the tables below:
//
//	mg k=a flags="v t O1" has=Otv T=10 quiet
//
// k is %q with " b64" after it when the key came in base64; has lists the
// letters MetaFlags holds; the values follow for the letters that carry
// one (D always for ma); d is ms's value.
func renderMeta(req *mcproto.Request) string {
	if req.Op == mcproto.OpNoop {
		return "mn"
	}
	var b strings.Builder
	b.WriteString(req.Op.String())
	e, m := req.Echo.Meta, &req.Meta
	if e == nil || len(req.Keys) != 1 || !bytes.Equal(req.Keys[0], e.Key) || req.Echo.Op != req.Op {
		return b.String() + " BROKEN ECHO"
	}
	if e.Base64 {
		fmt.Fprintf(&b, " k=%q b64", e.Key)
	} else {
		fmt.Fprintf(&b, " k=%s", e.Key)
	}
	if len(e.Flags) > 0 {
		fmt.Fprintf(&b, " flags=%q", e.Flags)
	}
	var has []byte
	for c := byte('A'); c <= 'z'; c++ {
		if m.Has(c) {
			has = append(has, c)
		}
	}
	if len(has) > 0 {
		fmt.Fprintf(&b, " has=%s", has)
	}
	if m.Mode != 0 {
		fmt.Fprintf(&b, " M=%c", m.Mode)
	}
	if m.Has('F') {
		fmt.Fprintf(&b, " F=%d", m.ClientFlags)
	}
	for _, v := range []struct {
		flag byte
		val  any
	}{{'T', m.TTL}, {'N', m.Vivify}, {'R', m.Recache}, {'C', m.CompareCAS}, {'E', m.NewCAS}, {'J', m.Initial}} {
		if m.Has(v.flag) {
			fmt.Fprintf(&b, " %c=%d", v.flag, v.val)
		}
	}
	if req.Op == mcproto.OpMetaArith || m.Delta != 0 {
		fmt.Fprintf(&b, " D=%d", m.Delta)
	}
	if req.Echo.Quiet {
		b.WriteString(" quiet")
	}
	if req.Echo.Noreply {
		b.WriteString(" NOREPLY")
	}
	if req.Op == mcproto.OpMetaSet {
		fmt.Fprintf(&b, " d=%q", req.Data)
	} else if req.Data != nil {
		b.WriteString(" DATA")
	}
	return b.String()
}

var (
	o32 = "O" + strings.Repeat("o", 31) // the longest opaque token
	o33 = o32 + "o"
	// seventeen distinct flags: an mg line of 19 words, the most memcached
	// takes; ms has a word more (its length).
	flags17 = "v t c f s k l h q u O P L I x T1 N2"
	flags16 = "t c f s k l h q u O P L I x T1 N2"
	// a base64 key of 248 bytes (186 decoded), and one a byte too long.
	b64k248 = strings.Repeat("Zm9v", 62)
	b64k252 = strings.Repeat("Zm9v", 63)
)

// Shorthands for the error results.
const (
	eERROR    = `ERR "ERROR"`
	eBadLine  = `ERR "CLIENT_ERROR bad command line format"`
	eDup      = `ERR "CLIENT_ERROR duplicate flag"`
	eInvalid  = `ERR "CLIENT_ERROR invalid flag"`
	eBadToken = `ERR "CLIENT_ERROR bad token in command line format"`
	eMLen     = `ERR "CLIENT_ERROR incorrect length for M token"`
	eInitial  = `ERR "CLIENT_ERROR invalid numeric initial value"`
	eDelta    = `ERR "CLIENT_ERROR invalid numeric delta value"`
	eDecode   = `ERR "CLIENT_ERROR error decoding key"`
	eInvDup   = `ERR "CLIENT_ERROR invalid or duplicate flag"`
	eModeMS   = `ERR "CLIENT_ERROR invalid mode for ms M token"`
	eModeMA   = `ERR "CLIENT_ERROR invalid mode for ma M token"`
	eOpaque   = `ERR "CLIENT_ERROR opaque token too long"`
	eAreLong  = `ERR "CLIENT_ERROR options flags are too long"`
	eTooLong  = `ERR "CLIENT_ERROR options flags too long"`
	eChunk    = `ERR "CLIENT_ERROR bad data chunk"`
	eTooLarge = `ERR "SERVER_ERROR object too large for cache" toolarge ms k=a`
	eUnexpEOF = "UNEXPECTED_EOF"
)

// metaParseTests are read with Limits{MaxItemSize: 16}, like parseTests.
// The errors and their order are memcached 1.6.18's (proto_text.c), the
// newer flags E and x as memcached has them since 1.6.27.
var metaParseTests = []struct {
	name string
	in   string
	want []string
}{
	// mn, and words that are not meta commands.
	{"mn", "mn\r\nmn\nmn foo bar\r\n", []string{"mn", "mn", "mn", "EOF"}},
	{"not meta", "mx\r\nmgx a\r\nMG a\r\nm\r\nm g\r\n", []string{eERROR, eERROR, eERROR, eERROR, eERROR, "EOF"}},

	// mg: every flag.
	{"mg", "mg a\r\n", []string{"mg k=a", "EOF"}},
	{"mg bare", "mg\r\nmg \r\n", []string{eERROR, eERROR, "EOF"}},
	{"mg flags", "mg a v t c f s k l h O123 q u\r\n",
		[]string{`mg k=a flags="v t c f s k l h O123 q u" has=Ocfhklqstuv quiet`, "EOF"}},
	{"mg values", "mg a T10 N-1 R30 E99 C5 F7 J3 D4 Mz\r\n",
		[]string{`mg k=a flags="T10 N-1 R30 E99 C5 F7 J3 D4 Mz" has=CDEFJMNRT M=z F=7 T=10 N=-1 R=30 C=5 E=99 J=3 D=4`, "EOF"}},
	{"mg spaces", "  mg   a   v    t  \r\n", []string{`mg k=a flags="v t" has=tv`, "EOF"}},
	{"mg ignored flags", "mg a P L I x Ofoo\r\n", []string{`mg k=a flags="P L I x Ofoo" has=ILOPx`, "EOF"}},
	{"mg NUL ends the line", "mg a v\x00 t\r\n", []string{`mg k=a flags="v" has=v`, "EOF"}},
	{"mg key 250", "mg " + k250 + " v\r\n", []string{"mg k=" + k250 + ` flags="v" has=v`, "EOF"}},
	{"mg key 251", "mg " + k251 + " v\r\nmg " + k251 + " zz\r\n", []string{eBadLine, eBadLine, "EOF"}},
	{"mg 19 words", "mg a " + flags17 + "\r\n", []string{
		`mg k=a flags="` + flags17 + `" has=ILNOPTcfhklqstuvx T=1 N=2 quiet`, "EOF"}},
	{"mg 20 words", "mg a " + flags17 + " R1\r\nmg a" + strings.Repeat(" v", 30) + "\r\n", []string{eAreLong, eAreLong, "EOF"}},
	{"mg 20 words, long key first", "mg " + k251 + " " + flags17 + " R1\r\n", []string{eBadLine, "EOF"}},
	{"mg duplicate far apart", "mg a T4294967295 N+5 R\t7 C18446744073709551615 E-0 F4294967296 T1\tjunk\r\n", []string{eDup, "EOF"}},
	{"mg numbers", "mg a T4294967295 N+5 R\t7 C18446744073709551615 E-0 F4294967296 J1\tjunk\r\n", []string{
		"mg k=a flags=\"T4294967295 N+5 R\\t7 C18446744073709551615 E-0 F4294967296 J1\\tjunk\" has=CEFJNRT F=0 T=-1 N=5 R=7 C=18446744073709551615 E=0 J=1", "EOF"}},

	// mg: flag errors, and which one wins.
	{"mg duplicate", "mg a v v\r\nmg a vx vy\r\nmg a T1 T2\r\n", []string{eDup, eDup, eDup, "EOF"}},
	{"mg high bytes are duplicates", "mg a \x80\r\nmg a \x7f\r\nmg a \xff v\r\n", []string{eDup, eDup, eDup, "EOF"}},
	{"mg invalid", "mg a z\r\nmg a 1\r\nmg a S\r\nmg a a\r\nmg a \t\r\nmg a W\r\nmg a -\r\n",
		[]string{eInvalid, eInvalid, eInvalid, eInvalid, eInvalid, eInvalid, eInvalid, "EOF"}},
	{"mg invalid after duplicate", "mg a v v z\r\nmg a z v v\r\n", []string{eDup, eInvalid, "EOF"}},
	{"mg bad value then invalid", "mg a Tx zz\r\nmg a zz Tx\r\nmg a Tx v v\r\n", []string{eInvalid, eInvalid, eDup, "EOF"}},
	{"mg bad tokens", "mg a T\r\nmg a Tx\r\nmg a N-\r\nmg a R1x\r\nmg a Cx\r\nmg a C-1\r\nmg a Ex\r\nmg a T2147483648000000000000\r\n",
		[]string{eBadToken, eBadToken, eBadToken, eBadToken, eBadToken, eBadToken, eBadToken, eBadToken, "EOF"}},
	{"mg M length", "mg a M\r\nmg a Mxy\r\n", []string{eMLen, eMLen, "EOF"}},
	{"mg J and D", "mg a Jx\r\nmg a D-1\r\nmg a J\r\nmg a D18446744073709551616\r\n", []string{eInitial, eDelta, eInitial, eDelta, "EOF"}},
	{"mg last bad value wins", "mg a Tx Mab\r\nmg a Mab Tx\r\nmg a Jx Dx\r\nmg a Dx Jx\r\n", []string{eMLen, eBadToken, eDelta, eInitial, "EOF"}},
	{"mg bad F keeps the message", "mg a Fx\r\nmg a Tx Fx\r\nmg a Fx Tx\r\nmg a F-1\r\n", []string{eBadLine, eBadToken, eBadToken, eBadLine, "EOF"}},
	{"mg opaque", "mg a " + o32 + "\r\nmg a " + o33 + "\r\nmg a q " + o33 + "\r\n", []string{
		`mg k=a flags="` + o32 + `" has=O`, eOpaque, eOpaque, "EOF"}},
	{"mg opaque after flag errors", "mg a " + o33 + " Tx\r\nmg a " + o33 + " zz\r\n", []string{eBadToken, eInvalid, "EOF"}},
	{"mg q errors shown", "mg a q v v\r\nmg a q Tx\r\n", []string{eDup, eBadToken, "EOF"}},

	// Base64 keys, decoded as memcached's base64_decode decodes.
	{"b64", "mg Zm9v b v\r\nmg IGEK b k\r\n", []string{`mg k="foo" b64 flags="b v" has=bv`, `mg k=" a\n" b64 flags="b k" has=bk`, "EOF"}},
	{"b64 quirks", "mg Zm9v! b\r\nmg Zg==Zm9v b\r\nmg Zm=v b\r\nmg Zg=x b\r\nmg Z.g.=.= b\r\n", []string{
		`mg k="foo" b64 flags="b" has=b`, `mg k="f" b64 flags="b" has=b`, "mg k=\"f`\" b64 flags=\"b\" has=b",
		`mg k="f\x00" b64 flags="b" has=b`, `mg k="f" b64 flags="b" has=b`, "EOF"}},
	{"b64 malformed", "mg Zm9 b\r\nmg Zg= b\r\nmg Z=== b\r\nmg ==== b\r\nmg !!!! b\r\nmg Zg==Z b\r\n",
		[]string{eDecode, eDecode, eDecode, eDecode, eDecode, eDecode, "EOF"}},
	{"b64 long", "mg " + b64k248 + " b\r\nmg " + b64k252 + " b\r\n", []string{
		fmt.Sprintf(`mg k=%q b64 flags="b" has=b`, strings.Repeat("foo", 62)), eBadLine, "EOF"}},
	{"b64 duplicate", "mg Zm9v b b\r\n", []string{eDup, "EOF"}},
	{"b64 error then bad value", "mg Zm9 b Tx\r\nmg Zm9 b Fx\r\nmg a Tx b\r\n", []string{eBadToken, eDecode, eDecode, "EOF"}},

	// ms.
	{"ms", "ms a 3\r\nxyz\r\n", []string{`ms k=a d="xyz"`, "EOF"}},
	{"ms empty", "ms a 0\r\n\r\n", []string{`ms k=a d=""`, "EOF"}},
	{"ms flags", "ms a 2 T10 F5 C99 E7 I q MR " + o32 + " k c b\r\nhi\r\n", []string{eDecode, "EOF"}},
	{"ms all flags", "ms Zm9v 2 T10 F5 C99 E7 I q MR " + o32 + " k c b\r\nhi\r\n", []string{
		`ms k="foo" b64 flags="T10 F5 C99 E7 I q MR ` + o32 + ` k c b" has=CEFIMOTbckq M=R F=5 T=10 C=99 E=7 quiet d="hi"`, "EOF"}},
	{"ms modes", "ms a 1 ME\r\nx\r\nms a 1 MA\r\nx\r\nms a 1 MP\r\nx\r\nms a 1 MR\r\nx\r\nms a 1 MS\r\nx\r\n", []string{
		`ms k=a flags="ME" has=M M=E d="x"`, `ms k=a flags="MA" has=M M=A d="x"`, `ms k=a flags="MP" has=M M=P d="x"`,
		`ms k=a flags="MR" has=M M=R d="x"`, `ms k=a flags="MS" has=M M=S d="x"`, "EOF"}},
	{"ms get flags", "ms a 1 v t s f h l u x N5 R5\r\nx\r\n", []string{
		`ms k=a flags="v t s f h l u x N5 R5" has=NRfhlstuvx N=5 R=5 d="x"`, "EOF"}},
	{"ms length as C reads it", "ms a 4294967297\r\nx\r\nms a +1\tjunk\r\ny\r\n", []string{`ms k=a d="x"`, `ms k=a d="y"`, "EOF"}},
	{"ms 19 words", "ms a 1 " + flags16 + "\r\nx\r\n", []string{
		`ms k=a flags="` + flags16 + `" has=ILNOPTcfhklqstux T=1 N=2 quiet d="x"`, "EOF"}},

	// ms errors before its length is known: nothing is swallowed, so the
	// data block is read as a command line.
	{"ms bare", "ms\r\nms a\r\nms a \r\n", []string{eERROR, eBadLine, eBadLine, "EOF"}},
	{"ms key 251", "ms " + k251 + " 1\r\nx\r\n", []string{eBadLine, eERROR, "EOF"}},
	{"ms bad length", "ms a x\r\nx\r\nms a -1\r\nx\r\nms a 2147483646\r\nms a T1 1\r\n", []string{
		eBadLine, eERROR, eBadLine, eERROR, eBadLine, eBadLine, "EOF"}},
	{"ms 20 words", "ms a 1 " + flags17 + "\r\nx\r\n", []string{eTooLong, eERROR, "EOF"}},
	{"ms 20 words bad length", "ms a x " + flags17 + "\r\n", []string{eTooLong, "EOF"}},

	// ms errors after its length: the block is swallowed.
	{"ms duplicate", "ms a 1 v v\r\nx\r\nmn\r\n", []string{eDup, "mn", "EOF"}},
	{"ms invalid", "ms a 1 zz\r\nx\r\nmn\r\nms a 1 S1\r\nx\r\nmn\r\n", []string{eInvalid, "mn", eInvalid, "mn", "EOF"}},
	{"ms bad values", "ms a 1 Tx\r\nx\r\nms a 1 Fx\r\nx\r\nms a 1 F-1\r\nx\r\nms a 1 Fx Tx\r\nx\r\nms a 1 M\r\nx\r\nms a 1 Cx\r\nx\r\nmn\r\n",
		[]string{eBadToken, eBadLine, eBadLine, eBadToken, eMLen, eBadToken, "mn", "EOF"}},
	{"ms F wraps", "ms a 1 F4294967296\r\nx\r\n", []string{`ms k=a flags="F4294967296" has=F F=0 d="x"`, "EOF"}},
	{"ms bad mode", "ms a 1 Mz\r\nx\r\nms a 1 Me\r\nx\r\nmn\r\n", []string{eModeMS, eModeMS, "mn", "EOF"}},
	{"ms opaque", "ms a 1 " + o33 + "\r\nx\r\nmn\r\n", []string{eOpaque, "mn", "EOF"}},
	{"ms mode wins over opaque", "ms a 1 " + o33 + " Mz\r\nx\r\nmn\r\n", []string{eModeMS, "mn", "EOF"}},
	{"ms flag error wins over opaque", "ms a 1 " + o33 + " Tx\r\nx\r\nmn\r\n", []string{eBadToken, "mn", "EOF"}},
	{"ms b64 error", "ms Zm9 1 b\r\nx\r\nmn\r\n", []string{eDecode, "mn", "EOF"}},
	{"ms swallow binary", "ms a 4 zz\r\nmn\r\n\r\nmn\r\n", []string{eInvalid, "mn", "EOF"}},
	{"ms q errors shown", "ms a 1 q v v\r\nx\r\nms a 1 q\r\nxyz\r\n", []string{eDup, eChunk, eERROR, "EOF"}},
	{"ms error cut short", "ms a 5 Tx\r\nab", []string{eBadToken, eUnexpEOF}},

	// ms data block, as set's.
	{"ms too large", "ms a 20\r\n01234567890123456789\r\nmn\r\n", []string{eTooLarge, "mn", "EOF"}},
	{"ms too large q", "ms a 20 q\r\n01234567890123456789\r\nmn\r\n", []string{eTooLarge, "mn", "EOF"}},
	{"ms at the limit", "ms a 16\r\n0123456789abcdef\r\nms a 17\r\n0123456789abcdefg\r\n", []string{
		`ms k=a d="0123456789abcdef"`, eTooLarge, "EOF"}},
	{"ms too large flag error", "ms a 20 zz\r\n01234567890123456789\r\nmn\r\n", []string{eInvalid, "mn", "EOF"}},
	{"ms bad data chunk", "ms a 1\r\nxy\r\nmn\r\n", []string{eChunk, eERROR, "mn", "EOF"}},
	{"ms bad data chunk LF", "ms a 1\r\nx\nmn\r\n", []string{eChunk, eERROR, "EOF"}},
	{"ms cut short", "ms a 5\r\nabc", []string{eUnexpEOF}},
	{"ms binary data", "ms a 4\r\n\r\n\x00\n\r\n", []string{"ms k=a d=\"\\r\\n\\x00\\n\"", "EOF"}},

	// md.
	{"md", "md a\r\n", []string{"md k=a", "EOF"}},
	{"md flags", "md a q C5 I T30 x E9 k " + o32 + " Mz\r\n", []string{
		`md k=a flags="q C5 I T30 x E9 k ` + o32 + ` Mz" has=CEIMOTkqx M=z T=30 C=5 E=9 quiet`, "EOF"}},
	{"md bare", "md\r\n", []string{eERROR, "EOF"}},
	{"md key 251", "md " + k251 + "\r\n", []string{eBadLine, "EOF"}},
	{"md 20 words", "md a " + flags17 + " R1\r\n", []string{eTooLong, "EOF"}},
	{"md flag errors", "md a v v\r\nmd a zz\r\nmd a Tx\r\nmd Zm9 b\r\nmd a M\r\nmd a Fx\r\n", []string{
		eInvDup, eInvDup, eInvDup, eInvDup, eInvDup, eInvDup, "EOF"}},
	{"md opaque", "md a " + o33 + "\r\nmd a q " + o33 + "\r\n", []string{eOpaque, eOpaque, "EOF"}},
	{"md b64", "md Zm9v b k\r\n", []string{`md k="foo" b64 flags="b k" has=bk`, "EOF"}},

	// ma.
	{"ma", "ma a\r\n", []string{"ma k=a D=1", "EOF"}},
	{"ma flags", "ma a N0 J10 D5 MD q T0 C3 E4 v t c k " + o32 + "\r\n", []string{
		`ma k=a flags="N0 J10 D5 MD q T0 C3 E4 v t c k ` + o32 + `" has=CDEJMNOTckqtv M=D T=0 N=0 C=3 E=4 J=10 D=5 quiet`, "EOF"}},
	{"ma modes", "ma a MI\r\nma a M+\r\nma a M-\r\nma a MD\r\n", []string{
		`ma k=a flags="MI" has=M M=I D=1`, `ma k=a flags="M+" has=M M=+ D=1`, `ma k=a flags="M-" has=M M=- D=1`,
		`ma k=a flags="MD" has=M M=D D=1`, "EOF"}},
	{"ma bare", "ma\r\n", []string{eERROR, "EOF"}},
	{"ma key 251", "ma " + k251 + "\r\n", []string{eBadLine, "EOF"}},
	{"ma 20 words", "ma a " + flags17 + " R1\r\n", []string{eTooLong, "EOF"}},
	{"ma flag errors", "ma a Dx\r\nma a J-1\r\nma a D\r\nma a zz\r\nma a q q\r\n", []string{eInvDup, eInvDup, eInvDup, eInvDup, eInvDup, "EOF"}},
	{"ma bad mode", "ma a Mi\r\nma a MS\r\n", []string{eModeMA, eModeMA, "EOF"}},
	{"ma mode wins over opaque", "ma a " + o33 + " Mx\r\nma a " + o33 + "\r\n", []string{eModeMA, eOpaque, "EOF"}},
	{"ma D0 and max", "ma a D0\r\nma a D18446744073709551615\r\n", []string{
		`ma k=a flags="D0" has=D D=0`, `ma k=a flags="D18446744073709551615" has=D D=18446744073709551615`, "EOF"}},

	// me.
	{"me", "me a\r\nme a zz yy\r\n", []string{"me k=a", `me k=a flags="zz yy"`, "EOF"}},
	{"me bare", "me\r\nme \r\n", []string{eBadLine, eBadLine, "EOF"}},
	{"me key 251", "me " + k251 + "\r\n", []string{eBadLine, "EOF"}},
	{"me b64", "me Zm9v b\r\nme Zm9v bx\r\nme Zm9v x b\r\nme Zm9v b b\r\n", []string{
		`me k="foo" b64 flags="b"`, `me k=Zm9v flags="bx"`, `me k=Zm9v flags="x b"`, `me k="foo" b64 flags="b b"`, "EOF"}},
	{"me b64 malformed", "me a b\r\n", []string{eBadLine, "EOF"}},

	// Pipelines mixing text and meta.
	{"pipeline", "set a 0 0 1\r\nx\r\nmg a v\r\nget a\r\nms b 2 T0\r\nhi\r\nmn\r\ndelete a\r\nmd b q\r\nmn\r\n", []string{
		`set k=a d="x"`, `mg k=a flags="v" has=v`, "get k=a", `ms k=b flags="T0" has=T T=0 d="hi"`, "mn",
		"delete k=a", `md k=b flags="q" has=q quiet`, "mn", "EOF"}},
	{"pipeline errors", "ms a 1 v v\r\nx\r\nget a\r\nma a Dx\r\nincr a 1\r\nmg\r\nmn\r\n", []string{
		eDup, "get k=a", eInvDup, "incr k=a delta=1", eERROR, "mn", "EOF"}},
	{"http after m", "mg / HTTP/1.1\r\n", []string{eInvalid, "EOF"}},
	{"partial meta line", "mg a v", []string{eUnexpEOF}},
}

func TestParseMeta(t *testing.T) {
	lim := mcproto.Limits{MaxItemSize: 16}
	for _, tt := range metaParseTests {
		t.Run(tt.name, func(t *testing.T) {
			for how, r := range readers(tt.in) {
				assert.Equal(t, tt.want, parseAll(t, r, lim), how)
			}
		})
	}
}

// TestMetaLineLimit: a meta line is bounded by MaxLine like every line but
// the multigets.
func TestMetaLineLimit(t *testing.T) {
	lim := mcproto.Limits{MaxLine: 2048, MaxMultigetLine: 8192}
	at := "mg a " + strings.Repeat("z", 2048-5)
	for how, r := range readers(at + "\r\n" + at + "x\r\n") {
		assert.Equal(t, []string{eInvalid, "CLOSE"}, parseAll(t, r, lim), how)
	}
	for how, r := range readers("ms a 1 " + strings.Repeat("T", 3000)) {
		assert.Equal(t, []string{"CLOSE"}, parseAll(t, r, lim), how)
	}
}

// TestMetaEchoOutlivesBuffer: a reply is rendered after the Reader has
// moved on, so each request's Echo must hold its own copy of the flags and
// the key, whatever the Reader did with its buffers meanwhile (grown for a
// multiget, compacted, overwritten by a large value).
func TestMetaEchoOutlivesBuffer(t *testing.T) {
	big := strings.Repeat("B", 3*initialBufSize)
	var in strings.Builder
	var want []string
	for i := range 200 {
		key, flags := fmt.Sprintf("key%d", i), fmt.Sprintf("v O%d t", i)
		switch i % 4 {
		case 0:
			fmt.Fprintf(&in, "mg %s %s\r\n", key, flags)
		case 1:
			fmt.Fprintf(&in, "ms %s %d %s\r\n%s\r\n", key, len(big), flags, big)
		case 2:
			key = fmt.Sprintf("k\x00%d", i)
			fmt.Fprintf(&in, "md %s b %s\r\n", base64.StdEncoding.EncodeToString([]byte(key)), flags)
			flags = "b " + flags
		case 3:
			fmt.Fprintf(&in, "ma %s %s\r\nget %s\r\n", key, flags, strings.Repeat("x ", 2000))
		}
		want = append(want, key+"|"+flags)
	}
	for how, r := range readers(in.String()) {
		pr := NewReader(r, mcproto.Limits{MaxItemSize: 4 * initialBufSize})
		var echoes []*mcproto.MetaEcho
		var req mcproto.Request
		for {
			err := pr.Next(&req)
			if err == io.EOF {
				break
			}
			require.NoError(t, err, how)
			if req.Echo.Meta != nil {
				echoes = append(echoes, req.Echo.Meta)
			}
		}
		got := make([]string, len(echoes))
		for i, e := range echoes {
			got[i] = string(e.Key) + "|" + string(e.Flags)
		}
		assert.Equal(t, want, got, how)
	}
}

// TestMetaAllocs: a meta request costs its echo (the MetaEcho and one
// buffer for its flags and key), nothing more.
func TestMetaAllocs(t *testing.T) {
	in := strings.Repeat("mg somekey v t c Oopaque k\r\nms otherkey 5 T10 c\r\nhello\r\nmn\r\n", 100)
	r := strings.NewReader(in)
	pr := NewReader(r, mcproto.Limits{})
	var req mcproto.Request
	allocs := testing.AllocsPerRun(50, func() {
		r.Reset(in)
		pr.pos, pr.end = 0, 0
		for range 300 {
			if err := pr.Next(&req); err != nil {
				t.Fatal(err)
			}
		}
	})
	assert.LessOrEqual(t, allocs, float64(2*200))
}

// TestDecodeBase64 holds memcached's decoder to the standard one on
// canonical input, and to its own rules on the rest.
func TestDecodeBase64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var dst [mcproto.MaxKeyLen]byte
	for range 2000 {
		src := make([]byte, 1+rng.IntN(187))
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		enc := []byte(base64.StdEncoding.EncodeToString(src))
		n, ok := decodeBase64(dst[:], enc)
		require.True(t, ok, "%q", enc)
		require.Equal(t, src, dst[:n])
	}
	for in, want := range map[string]string{
		"Zm9v": "foo", "Zm9vYg==": "foob", "Zm9vYmE=": "fooba", "Zm9v!": "foo", "!Z!m!9!v!": "foo",
		"Zg==Zm9v": "f", "Zg==!!!!": "f", "Zm=v": "f`", "Zg=x": "f\x00", "Z.g.=.=": "f", "AAAA": "\x00\x00\x00",
		"Zm9": "", "Zg=": "", "Z===": "", "====": "", "!!!!": "", "": "", "Zg==Z": "", "Zm9vZ": "",
	} {
		n, ok := decodeBase64(dst[:], []byte(in))
		if want == "" {
			assert.False(t, ok, "%q", in)
			continue
		}
		assert.True(t, ok, "%q", in)
		assert.Equal(t, want, string(dst[:n]), "%q", in)
	}
}

// TestMetaSwallow: the block of an ms refused after its length is known
// is discarded, in the swallow phase, and is no pending request.
func TestMetaSwallow(t *testing.T) {
	in := "ms a 100 zz\r\n" + strings.Repeat("x", 102) + "mn\r\n"
	pr := NewReader(strings.NewReader(in), mcproto.Limits{})
	var req mcproto.Request
	var pe *mcproto.Error
	require.ErrorAs(t, pr.Next(&req), &pe)
	assert.Equal(t, MsgInvalidFlag+"\r\n", string(pe.Reply))
	assert.False(t, pe.Close)
	assert.Equal(t, mcproto.PhaseSwallow, pr.Phase())
	assert.Equal(t, len("mn\r\n"), pr.Buffered())
	require.NoError(t, pr.Next(&req))
	assert.Equal(t, mcproto.OpNoop, req.Op)
	assert.Equal(t, mcproto.Meta, req.Echo.Proto)
}
