package binary

import (
	"bytes"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/mcproto"
)

var noop = pkt(OpcodeNoop, "", "", "", 0, 7)

const noopOut = "noop [0x0a opaque=7]"

// decodeTests: each input is decoded to the end; the stream continues
// with a Noop wherever memcached keeps the connection, so that each case
// also shows where the next request starts. The answers and closes are
// memcached 1.6.18's, checked against the real server.
var decodeTests = []struct {
	name string
	in   []byte
	want []string
}{
	// Every opcode memcached serves.
	{"get", cat(pkt(OpcodeGet, "k", "", "", 5, 1), noop), []string{`get ["k"] [0x00 opaque=1]`, noopOut, "EOF"}},
	{"getq", pkt(OpcodeGetQ, "k", "", "", 0, 2), []string{`get ["k"] [0x09 opaque=2 quiet]`, "EOF"}},
	{"getk", pkt(OpcodeGetK, "k", "", "", 0, 3), []string{`get ["k"] [0x0c opaque=3]`, "EOF"}},
	{"getkq", pkt(OpcodeGetKQ, "k", "", "", 0, 4), []string{`get ["k"] [0x0d opaque=4 quiet]`, "EOF"}},
	{"set", pkt(OpcodeSet, "k", be32(0xcafe)+be32(100), "hello", 0, 1),
		[]string{`set ["k"] flags=51966 exptime=100 data="hello" [0x01 opaque=1]`, "EOF"}},
	{"setq empty value", pkt(OpcodeSetQ, "k", be32(0)+be32(0), "", 0, 1), []string{`set ["k"] data="" [0x11 opaque=1 quiet]`, "EOF"}},
	{"set with cas is cas", pkt(OpcodeSet, "k", be32(1)+be32(2), "v", 99, 1),
		[]string{`cas ["k"] flags=1 exptime=2 cas=99 data="v" [0x01 opaque=1]`, "EOF"}},
	{"add", pkt(OpcodeAdd, "k", be32(0)+be32(0), "v", 0, 1), []string{`add ["k"] data="v" [0x02 opaque=1]`, "EOF"}},
	{"addq with cas is cas", pkt(OpcodeAddQ, "k", be32(0)+be32(0), "v", 3, 1), []string{`cas ["k"] cas=3 data="v" [0x12 opaque=1 quiet]`, "EOF"}},
	{"replace", pkt(OpcodeReplace, "k", be32(0)+be32(0), "v", 0, 1), []string{`replace ["k"] data="v" [0x03 opaque=1]`, "EOF"}},
	{"replaceq with cas is cas", pkt(OpcodeReplaceQ, "k", be32(0)+be32(0), "v", 3, 1), []string{`cas ["k"] cas=3 data="v" [0x13 opaque=1 quiet]`, "EOF"}},
	{"exptime is unsigned", pkt(OpcodeSet, "k", be32(0)+be32(0xffffffff), "v", 0, 1),
		[]string{`set ["k"] exptime=4294967295 data="v" [0x01 opaque=1]`, "EOF"}},
	{"append", pkt(OpcodeAppend, "k", "", "tail", 0, 1), []string{`append ["k"] data="tail" [0x0e opaque=1]`, "EOF"}},
	{"appendq with cas", pkt(OpcodeAppendQ, "k", "", "tail", 8, 1), []string{`append ["k"] cas=8 data="tail" [0x19 opaque=1 quiet]`, "EOF"}},
	{"prepend", pkt(OpcodePrepend, "k", "", "head", 0, 1), []string{`prepend ["k"] data="head" [0x0f opaque=1]`, "EOF"}},
	{"prependq", pkt(OpcodePrependQ, "k", "", "", 0, 1), []string{`prepend ["k"] data="" [0x1a opaque=1 quiet]`, "EOF"}},
	{"delete", pkt(OpcodeDelete, "k", "", "", 0, 1), []string{`delete ["k"] [0x04 opaque=1]`, "EOF"}},
	{"deleteq with cas", pkt(OpcodeDeleteQ, "k", "", "", 12, 1), []string{`delete ["k"] cas=12 [0x14 opaque=1 quiet]`, "EOF"}},
	{"incr", pkt(OpcodeIncrement, "n", be64(5)+be64(42)+be32(60), "", 0, 1),
		[]string{`incr ["n"] exptime=60 delta=5 initial=42 create=true [0x05 opaque=1]`, "EOF"}},
	{"incr no create", pkt(OpcodeIncrement, "n", be64(5)+be64(42)+be32(0xffffffff), "", 0, 1),
		[]string{`incr ["n"] delta=5 initial=42 create=false [0x05 opaque=1]`, "EOF"}},
	{"incrq with cas", pkt(OpcodeIncrementQ, "n", be64(1)+be64(0)+be32(0), "", 4, 1),
		[]string{`incr ["n"] cas=4 delta=1 initial=0 create=true [0x15 opaque=1 quiet]`, "EOF"}},
	{"decr", pkt(OpcodeDecrement, "n", be64(1<<63)+be64(0)+be32(0), "", 0, 1),
		[]string{`decr ["n"] delta=9223372036854775808 initial=0 create=true [0x06 opaque=1]`, "EOF"}},
	{"decrq", pkt(OpcodeDecrementQ, "n", be64(1)+be64(0)+be32(0), "", 0, 1),
		[]string{`decr ["n"] delta=1 initial=0 create=true [0x16 opaque=1 quiet]`, "EOF"}},
	{"quit", cat(pkt(OpcodeQuit, "", "", "", 0, 1), noop), []string{`quit [0x07 opaque=1]`, noopOut, "EOF"}},
	{"quitq", pkt(OpcodeQuitQ, "", "", "", 0, 1), []string{`quit [0x17 opaque=1 quiet]`, "EOF"}},
	{"flush", pkt(OpcodeFlush, "", "", "", 0, 1), []string{`flush_all [0x08 opaque=1]`, "EOF"}},
	{"flush delay", pkt(OpcodeFlush, "", be32(30), "", 0, 1), []string{`flush_all delay=30 [0x08 opaque=1]`, "EOF"}},
	{"flushq delay 0", pkt(OpcodeFlushQ, "", be32(0), "", 0, 1), []string{`flush_all delay=0 [0x18 opaque=1 quiet]`, "EOF"}},
	{"noop", noop, []string{noopOut, "EOF"}},
	{"version", pkt(OpcodeVersion, "", "", "", 0, 1), []string{`version [0x0b opaque=1]`, "EOF"}},
	{"stat", pkt(OpcodeStat, "", "", "", 0, 1), []string{`stats [0x10 opaque=1]`, "EOF"}},
	{"stat group", pkt(OpcodeStat, "detail  on", "", "", 0, 1), []string{`stats args=["detail" "on"] [0x10 opaque=1]`, "EOF"}},
	{"touch", pkt(OpcodeTouch, "k", be32(10), "", 0, 1), []string{`touch ["k"] exptime=10 [0x1c opaque=1]`, "EOF"}},
	{"gat", pkt(OpcodeGAT, "k", be32(10), "", 0, 1), []string{`gat ["k"] exptime=10 [0x1d opaque=1]`, "EOF"}},
	{"gatq", pkt(OpcodeGATQ, "k", be32(10), "", 0, 1), []string{`gat ["k"] exptime=10 [0x1e opaque=1 quiet]`, "EOF"}},
	{"gatk", pkt(OpcodeGATK, "k", be32(10), "", 0, 1), []string{`gat ["k"] exptime=10 [0x23 opaque=1]`, "EOF"}},
	{"gatkq", pkt(OpcodeGATKQ, "k", be32(10), "", 0, 1), []string{`gat ["k"] exptime=10 [0x24 opaque=1 quiet]`, "EOF"}},
	{"sasl list", pkt(OpcodeSASLList, "", "", "", 0, 1), []string{`sasl_list_mechs [0x20 opaque=1]`, "EOF"}},
	{"sasl auth", pkt(OpcodeSASLAuth, "PLAIN", "", "\x00u\x00p", 0, 1), []string{`sasl_auth ["PLAIN"] data="\x00u\x00p" [0x21 opaque=1]`, "EOF"}},
	{"sasl step", pkt(OpcodeSASLStep, "PLAIN", "", "", 0, 1), []string{`sasl_step ["PLAIN"] data="" [0x22 opaque=1]`, "EOF"}},
	{"key of 250", pkt(OpcodeGet, strings.Repeat("k", 250), "", "", 0, 1), []string{`get ["` + strings.Repeat("k", 250) + `"] [0x00 opaque=1]`, "EOF"}},
	{"data type and vbucket ignored", func() []byte { p := pkt(OpcodeNoop, "", "", "", 0, 7); p[5], p[7] = 1, 5; return p }(),
		[]string{noopOut, "EOF"}},

	// What follows the key of a Touch, GAT or Stat is the next request.
	{"touch with a value", pkt(OpcodeTouch, "k", be32(0), string(noop), 0, 1), []string{`touch ["k"] [0x1c opaque=1]`, noopOut, "EOF"}},
	{"gatkq with a value", pkt(OpcodeGATKQ, "k", be32(0), string(noop), 0, 1), []string{`gat ["k"] [0x24 opaque=1 quiet]`, noopOut, "EOF"}},
	{"stat with a value", pkt(OpcodeStat, "", "", string(noop), 0, 1), []string{`stats [0x10 opaque=1]`, noopOut, "EOF"}},

	// Unknown opcodes: answered, body skipped, connection kept.
	{"verbosity is unknown", cat(pkt(0x1b, "", be32(1), "", 0, 1), noop),
		[]string{`error 0x81 "Unknown command" opcode=0x1b opaque=1 close=false`, noopOut, "EOF"}},
	{"unknown with key and value", cat(pkt(0x40, "abcd", "xy", "value", 0, 1), noop),
		[]string{`error 0x81 "Unknown command" opcode=0x40 opaque=1 close=false`, noopOut, "EOF"}},
	{"range opcode", cat(pkt(0x30, "", "", "", 0, 1), noop),
		[]string{`error 0x81 "Unknown command" opcode=0x30 opaque=1 close=false`, noopOut, "EOF"}},

	// Closing errors.
	{"bad magic", cat(noop, []byte{0x81}, noop[1:], noop), []string{noopOut, "close"}},
	{"bad magic first", cat([]byte{0x00}, noop[1:]), []string{"close"}},
	{"extras and key over the body", cat(rawPkt(OpcodeGet, 3, 0, 2, 0, 1, "abc"), noop),
		[]string{`error 0x81 "Unknown command" opcode=0x00 opaque=1 close=true`}},
	{"unknown with extras and key over the body", cat(rawPkt(0x40, 3, 0, 1, 0, 1, "abc"), noop),
		[]string{`error 0x81 "Unknown command" opcode=0x40 opaque=1 close=true`}},
	{"key of 251", cat(pkt(OpcodeGet, strings.Repeat("k", 251), "", "", 0, 1), noop),
		[]string{`error 0x04 "Invalid arguments" opcode=0x00 opaque=1 close=true`}},
	{"unknown with a key of 300", cat(pkt(0x40, strings.Repeat("k", 300), "", "", 0, 1), noop),
		[]string{`error 0x04 "Invalid arguments" opcode=0x40 opaque=1 close=true`}},
	{"key over the read buffer", rawPkt(OpcodeGet, 20000, 0, 20000, 0, 1, ""), []string{"close"}},
}

// Malformed bodies of known opcodes: "Invalid arguments", then close.
var malformed = []struct {
	name string
	in   []byte
}{
	{"get with extras", pkt(OpcodeGet, "k", "1234", "", 0, 1)},
	{"get without key", pkt(OpcodeGetQ, "", "", "", 0, 1)},
	{"getk with value", pkt(OpcodeGetK, "k", "", "zz", 0, 1)},
	{"set without extras", pkt(OpcodeSet, "k", "", "v", 0, 1)},
	{"set with 4 bytes of extras", pkt(OpcodeSetQ, "k", "1234", "v", 0, 1)},
	{"add without key", pkt(OpcodeAdd, "", "12345678", "v", 0, 1)},
	{"append with extras", pkt(OpcodeAppend, "k", "1234", "v", 0, 1)},
	{"prepend without key", pkt(OpcodePrependQ, "", "", "v", 0, 1)},
	{"delete with extras", pkt(OpcodeDelete, "k", "1234", "", 0, 1)},
	{"delete with value", pkt(OpcodeDeleteQ, "k", "", "1234", 0, 1)},
	{"delete without key", pkt(OpcodeDelete, "", "", "", 0, 1)},
	{"incr with 8 bytes of extras", pkt(OpcodeIncrement, "k", "12345678", "", 0, 1)},
	{"incr with value", pkt(OpcodeIncrementQ, "k", strings.Repeat("1", 20), "x", 0, 1)},
	{"decr without key", pkt(OpcodeDecrement, "", strings.Repeat("1", 20), "", 0, 1)},
	{"flush with 8 bytes of extras", pkt(OpcodeFlush, "", "12345678", "", 0, 1)},
	{"flush with key", pkt(OpcodeFlushQ, "k", "", "", 0, 1)},
	{"flush with value", pkt(OpcodeFlush, "", "", "1234", 0, 1)},
	{"noop with value", pkt(OpcodeNoop, "", "", "x", 0, 1)},
	{"version with value", pkt(OpcodeVersion, "", "", "1", 0, 1)},
	{"quit with key", pkt(OpcodeQuit, "k", "", "", 0, 1)},
	{"quitq with extras", pkt(OpcodeQuitQ, "", "1234", "", 0, 1)},
	{"stat with extras", pkt(OpcodeStat, "", "1234", "", 0, 1)},
	{"touch without extras", pkt(OpcodeTouch, "k", "", "", 0, 1)},
	{"gat without key", pkt(OpcodeGAT, "", "1234", "", 0, 1)},
	{"gatkq with 8 bytes of extras", pkt(OpcodeGATKQ, "k", "12345678", "", 0, 1)},
	{"sasl list with value", pkt(OpcodeSASLList, "", "", "x", 0, 1)},
	{"sasl auth without key", pkt(OpcodeSASLAuth, "", "", "x", 0, 1)},
	{"sasl step with extras", pkt(OpcodeSASLStep, "P", "1234", "x", 0, 1)},
}

func TestDecode(t *testing.T) {
	for _, tt := range decodeTests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, decodeAll(bytes.NewReader(tt.in), mcproto.Limits{}, 10))
			assert.Equal(t, tt.want, decodeAll(iotest.OneByteReader(bytes.NewReader(tt.in)), mcproto.Limits{}, 10), "one byte at a time")
		})
	}
	for _, tt := range malformed {
		t.Run(tt.name, func(t *testing.T) {
			want := []string{"error 0x04 \"Invalid arguments\" opcode=" + describeOpcode(tt.in[1]) + " opaque=1 close=true"}
			assert.Equal(t, want, decodeAll(bytes.NewReader(cat(tt.in, noop)), mcproto.Limits{}, 10))
		})
	}
}

func describeOpcode(op byte) string {
	const hex = "0123456789abcdef"
	return "0x" + string(hex[op>>4]) + string(hex[op&15])
}

// A value over the limit is swallowed without being buffered and answered
// "Too large."; the connection goes on. A set with a CAS still reports
// OpSet, so that the server drops the item as memcached does.
func TestTooLarge(t *testing.T) {
	lim := mcproto.Limits{MaxItemSize: 10}
	big := strings.Repeat("v", 11)
	for _, tt := range []struct {
		name string
		in   []byte
		want string
	}{
		{"set", pkt(OpcodeSet, "k", be32(3)+be32(4), big, 0, 1),
			`error 0x03 "Too large." opcode=0x01 opaque=1 close=false too-large set ["k"] flags=3 exptime=4 cas=0`},
		{"setq with cas", pkt(OpcodeSetQ, "k", be32(3)+be32(4), big, 9, 1),
			`error 0x03 "Too large." opcode=0x11 opaque=1 close=false too-large set ["k"] flags=3 exptime=4 cas=9`},
		{"add with cas", pkt(OpcodeAdd, "k", be32(0)+be32(0), big, 9, 1),
			`error 0x03 "Too large." opcode=0x02 opaque=1 close=false too-large cas ["k"] flags=0 exptime=0 cas=9`},
		{"append", pkt(OpcodeAppend, "k", "", big, 0, 1),
			`error 0x03 "Too large." opcode=0x0e opaque=1 close=false too-large append ["k"] flags=0 exptime=0 cas=0`},
		{"prependq", pkt(OpcodePrependQ, "k", "", big, 0, 1),
			`error 0x03 "Too large." opcode=0x1a opaque=1 close=false too-large prepend ["k"] flags=0 exptime=0 cas=0`},
		{"sasl auth", pkt(OpcodeSASLAuth, "PLAIN", "", big, 0, 1),
			`error 0x81 "Unknown command" opcode=0x21 opaque=1 close=false`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := cat(tt.in, noop)
			want := []string{tt.want, noopOut, "EOF"}
			assert.Equal(t, want, decodeAll(bytes.NewReader(in), lim, 10))
			assert.Equal(t, want, decodeAll(iotest.OneByteReader(bytes.NewReader(in)), lim, 10))
		})
	}
	// At the limit it is read.
	in := pkt(OpcodeSet, "k", be32(0)+be32(0), big[:10], 0, 1)
	assert.Equal(t, []string{`set ["k"] data="vvvvvvvvvv" [0x01 opaque=1]`, "EOF"}, decodeAll(bytes.NewReader(in), lim, 10))
}

// Values larger than the read buffer are read into a buffer of their own,
// whichever way the bytes arrive.
func TestBigValues(t *testing.T) {
	lim := mcproto.Limits{MaxItemSize: 3 * readBufSize}
	for _, n := range []int{readBufSize - HeaderLen - 9, readBufSize, readBufSize + 1, 3 * readBufSize} {
		v := strings.Repeat("x", n-1) + "y"
		in := cat(pkt(OpcodeSet, "k", be32(0)+be32(0), v, 0, 1), pkt(OpcodeAppend, "k", "", v, 0, 2), noop)
		for _, rd := range []io.Reader{bytes.NewReader(in), iotest.HalfReader(bytes.NewReader(in)), iotest.OneByteReader(bytes.NewReader(in))} {
			c := NewCodec(rd, lim)
			var req mcproto.Request
			require.NoError(t, c.Next(&req))
			require.Equal(t, v, string(req.Data))
			require.NoError(t, c.Next(&req))
			require.Equal(t, mcproto.OpAppend, req.Op)
			require.Equal(t, v, string(req.Data))
			require.NoError(t, c.Next(&req))
			require.Equal(t, mcproto.OpNoop, req.Op)
			require.Equal(t, io.EOF, c.Next(&req))
		}
	}
}

// The stream ending inside a request is io.ErrUnexpectedEOF, between two
// io.EOF; both close without a reply.
func TestCutShort(t *testing.T) {
	full := pkt(OpcodeSet, "key", be32(0)+be32(0), "value", 0, 1)
	for i := 1; i < len(full); i++ {
		var req mcproto.Request
		c := NewCodec(bytes.NewReader(full[:i]), mcproto.Limits{})
		assert.Equal(t, io.ErrUnexpectedEOF, c.Next(&req), "cut at %d", i)
		assert.Equal(t, io.ErrUnexpectedEOF, c.Next(&req), "sticky")
	}
	// Inside a value being swallowed.
	c := NewCodec(bytes.NewReader(full[:len(full)-1]), mcproto.Limits{MaxItemSize: 1})
	var req mcproto.Request
	err := c.Next(&req)
	var pe *mcproto.Error
	require.ErrorAs(t, err, &pe)
	assert.True(t, pe.TooLarge)
	assert.Equal(t, io.ErrUnexpectedEOF, c.Next(&req))
}

// Buffered counts what is read and not decoded, without the bytes to
// swallow; Phase tells header, value and swallow apart.
func TestBufferedAndPhase(t *testing.T) {
	in := cat(noop, noop)
	c := NewCodec(bytes.NewReader(in), mcproto.Limits{})
	var req mcproto.Request
	require.NoError(t, c.Next(&req))
	assert.Equal(t, HeaderLen, c.Buffered())
	assert.Equal(t, mcproto.PhaseLine, c.Phase())
	require.NoError(t, c.Next(&req))
	assert.Equal(t, 0, c.Buffered())

	big := pkt(OpcodeSet, "k", be32(0)+be32(0), strings.Repeat("v", 100), 0, 1)
	c = NewCodec(bytes.NewReader(cat(big, noop)), mcproto.Limits{MaxItemSize: 10})
	require.Error(t, c.Next(&req))
	assert.Equal(t, HeaderLen, c.Buffered(), "the value to swallow is not counted")
	assert.Equal(t, mcproto.PhaseSwallow, c.Phase())
	require.NoError(t, c.Next(&req))
	assert.Equal(t, mcproto.PhaseLine, c.Phase())

	// While Next waits for a value's bytes.
	var phases []mcproto.Phase
	pr := &phaseReader{r: iotest.OneByteReader(bytes.NewReader(big))}
	c = NewCodec(pr, mcproto.Limits{})
	pr.c = c
	require.NoError(t, c.Next(&req))
	for _, p := range pr.seen {
		if len(phases) == 0 || phases[len(phases)-1] != p {
			phases = append(phases, p)
		}
	}
	assert.Equal(t, []mcproto.Phase{mcproto.PhaseLine, mcproto.PhaseValue}, phases)
}

type phaseReader struct {
	r    io.Reader
	c    *Codec
	seen []mcproto.Phase
}

func (p *phaseReader) Read(b []byte) (int, error) {
	p.seen = append(p.seen, p.c.Phase())
	return p.r.Read(b)
}

// A declared body length costs nothing until its bytes arrive: a header
// claiming 4 GiB of value (swallowed) or a value at a 1 GiB limit that
// never comes allocate a few small things, not what they claim.
func TestDeclaredLengthAllocatesNothing(t *testing.T) {
	huge := rawPkt(OpcodeSet, 1, 8, 0xffffffff, 0, 1, "12345678k")
	c := NewCodec(bytes.NewReader(nil), mcproto.Limits{})
	var req mcproto.Request
	measure := func(in []byte, lim mcproto.Limits) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 100 {
			c = NewCodec(bytes.NewReader(in), lim)
			_ = c.Next(&req)
			_ = c.Next(&req)
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / 100
	}
	base := measure(noop, mcproto.Limits{})
	assert.Less(t, measure(huge, mcproto.Limits{}), base+1024, "4 GiB declared, swallowed")
	claim := rawPkt(OpcodeSet, 1, 8, 1<<30+9, 0, 1, "12345678kvalue")
	assert.Less(t, measure(claim, mcproto.Limits{MaxItemSize: 1 << 30}), base+minValueBuf+1024, "1 GiB declared, 5 bytes sent")

	// The steady state allocates nothing at all.
	stream := bytes.Repeat(cat(pkt(OpcodeSet, "k", be32(0)+be32(0), "v", 0, 1), pkt(OpcodeGet, "k", "", "", 0, 2)), 1000)
	rd := bytes.NewReader(stream)
	c = NewCodec(rd, mcproto.Limits{})
	require.NoError(t, c.Next(&req)) // the read buffer
	allocs := testing.AllocsPerRun(500, func() {
		if err := c.Next(&req); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}
