package ascii

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/testing/chunkread"
)

// fuzzLimits are small so that random inputs reach every bound.
var fuzzLimits = mcproto.Limits{MaxItemSize: 64, MaxLine: 64, MaxMultigetLine: 256}

// fuzzBigValueLimits make the read buffer (MaxMultigetLine+3 bytes) smaller
// than the largest value, so that values also take readBlock's other path,
// read into a buffer of their own as the bytes arrive; with fuzzLimits every
// value fits the read buffer.
var fuzzBigValueLimits = mcproto.Limits{MaxItemSize: 200, MaxLine: 32, MaxMultigetLine: 32}

// knownReplies are all the lines Next may ask a server to write.
var knownReplies = map[string]bool{
	"": true, MsgError: true, MsgBadCommandLine: true, MsgBadDataChunk: true, MsgInvalidExptime: true,
	MsgInvalidDelta: true, MsgDeleteUsage: true, MsgObjectTooLarge: true, MsgShutdownDisabled: true,
	MsgFlagsAreTooLong: true, MsgFlagsTooLong: true, MsgDuplicateFlag: true, MsgInvalidFlag: true, MsgBadToken: true,
	MsgMTokenLength: true, MsgInvalidInitial: true, MsgInvalidDeltaValue: true, MsgDecodingKey: true,
	MsgInvalidOrDuplicateFlag: true, MsgInvalidModeMS: true, MsgInvalidModeMA: true, MsgOpaqueTooLong: true,
}

// FuzzReader: random input never panics, never makes the parser loop,
// never yields a request that breaks the limits or the per-command shape,
// and parses the same however the bytes are split.
func FuzzReader(f *testing.F) {
	for _, tt := range parseTests {
		f.Add([]byte(tt.in))
	}
	for _, tt := range metaParseTests {
		f.Add([]byte(tt.in))
	}
	f.Add([]byte("set k 0 0 150\r\n" + strings.Repeat("v", 150) + "\r\nget k\r\nset k 0 0 40 noreply\r\n" +
		strings.Repeat("w", 40) + "\nget k\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, lim := range []mcproto.Limits{fuzzLimits, fuzzBigValueLimits} {
			whole := fuzzParse(t, bytes.NewReader(in), len(in), lim)
			one := fuzzParse(t, iotest.OneByteReader(bytes.NewReader(in)), len(in), lim)
			chunked := fuzzParse(t, &chunkread.Reader{Data: in, Sizes: in, Max: 17}, len(in), lim)
			if !equalStrings(whole, one) || !equalStrings(whole, chunked) {
				t.Fatalf("split reads disagree (%+v):\nwhole   %q\none     %q\nchunked %q", lim, whole, one, chunked)
			}
		}
	})
}

func fuzzParse(t *testing.T, r io.Reader, n int, lim mcproto.Limits) []string {
	pr := NewReader(r, lim)
	var out []string
	var req mcproto.Request
	// Every result consumes at least one byte (a '\n'), so n+1 calls end it.
	for range n + 2 {
		err := pr.Next(&req)
		out = append(out, render(&req, err))
		if err != nil {
			var pe *mcproto.Error
			if !errors.As(err, &pe) {
				if err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error %v", err)
				}
				return out
			}
			if !knownReplies[replyLine(pe)] {
				t.Fatalf("unknown reply %q", replyLine(pe))
			}
			if pe.Close {
				if replyLine(pe) != "" {
					t.Fatalf("closing error with a reply %q", replyLine(pe))
				}
				return out
			}
			if pe.TooLarge && (!req.Op.IsStorage() && req.Op != mcproto.OpMetaSet || len(req.Keys) != 1) {
				t.Fatalf("too large without its request: %+v", req)
			}
			continue
		}
		checkRequest(t, &req, lim)
		if pr.Buffered() < 0 {
			t.Fatalf("negative Buffered")
		}
	}
	t.Fatalf("no progress after %d calls: %q", n+2, out)
	return nil
}

func checkRequest(t *testing.T, req *mcproto.Request, lim mcproto.Limits) {
	c := req.Op
	meta := req.Echo.Proto == mcproto.Meta
	switch {
	case c >= mcproto.OpGet && c <= mcproto.OpQuit:
	case meta && (c == mcproto.OpNoop || c >= mcproto.OpMetaGet && c <= mcproto.OpMetaDebug):
	default:
		t.Fatalf("bad command %d", c)
	}
	if meta {
		checkMetaRequest(t, req, lim)
	}
	switch {
	case meta:
	case c == mcproto.OpGet || c == mcproto.OpGets:
		if len(req.Keys) == 0 {
			t.Fatalf("%s without keys", c)
		}
	case c == mcproto.OpGat || c == mcproto.OpGats:
	case c.IsStorage() || c == mcproto.OpIncr || c == mcproto.OpDecr || c == mcproto.OpTouch || c == mcproto.OpDelete:
		if len(req.Keys) != 1 {
			t.Fatalf("%s with %d keys", c, len(req.Keys))
		}
	default:
		if len(req.Keys) != 0 {
			t.Fatalf("%s with keys", c)
		}
	}
	for _, k := range req.Keys {
		if len(k) == 0 || len(k) > mcproto.MaxKeyLen || !(meta && req.Echo.Meta.Base64) && bytes.ContainsAny(k, " \n\x00") {
			t.Fatalf("bad key %q", k)
		}
	}
	if len(req.Data) > lim.MaxItemSize {
		t.Fatalf("value of %d bytes over the limit", len(req.Data))
	}
	if !c.IsStorage() && c != mcproto.OpMetaSet && req.Data != nil {
		t.Fatalf("%s with data", c)
	}
	if req.Echo.Noreply && c.IsRetrieval() {
		t.Fatalf("%s with noreply", c)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkMetaRequest checks what a meta request carries: one key (none for
// mn), a base64 key only when b was given, and an echo that is its own
// copy of the key and holds only what the line held.
func checkMetaRequest(t *testing.T, req *mcproto.Request, lim mcproto.Limits) {
	e := req.Echo.Meta
	if req.Op == mcproto.OpNoop {
		if e != nil || len(req.Keys) != 0 {
			t.Fatalf("mn with an echo or keys: %+v", req)
		}
		return
	}
	switch {
	case e == nil || len(req.Keys) != 1:
		t.Fatalf("%s without its echo or key: %+v", req.Op, req)
	case !bytes.Equal(e.Key, req.Keys[0]) || &e.Key[0] != &req.Keys[0][0]:
		t.Fatalf("%s: the key is not the echo's copy", req.Op)
	case req.Echo.Op != req.Op || req.Echo.Noreply:
		t.Fatalf("%s: bad echo %+v", req.Op, req.Echo)
	case len(e.Flags)+len(e.Key) > lim.MaxLine:
		t.Fatalf("%s: echo of %d bytes from a line of at most %d", req.Op, len(e.Flags)+len(e.Key), lim.MaxLine)
	case req.Op != mcproto.OpMetaDebug && e.Base64 != req.Meta.Has('b'):
		t.Fatalf("%s: base64 %v but b %v", req.Op, e.Base64, req.Meta.Has('b'))
	case req.Echo.Quiet != req.Meta.Has('q'):
		t.Fatalf("%s: quiet %v but q %v", req.Op, req.Echo.Quiet, req.Meta.Has('q'))
	case bytes.Contains(e.Flags, []byte("  ")) || bytes.HasPrefix(e.Flags, []byte(" ")) || bytes.HasSuffix(e.Flags, []byte(" ")):
		t.Fatalf("%s: flags not joined by single spaces: %q", req.Op, e.Flags)
	}
	if req.Op != mcproto.OpMetaDebug && strings.Count(string(e.Flags), " ")+1 > maxMetaWords-2 {
		t.Fatalf("%s: %d flags", req.Op, strings.Count(string(e.Flags), " ")+1)
	}
}

// FuzzMeta: every meta request the parser accepts reads back the same from
// the line its echo describes (key, b and flags), and every reply rendered
// for it, whatever the outcome, is one well-formed line (VA's value after
// it), or nothing exactly where q drops it.
func FuzzMeta(f *testing.F) {
	for _, tt := range metaParseTests {
		f.Add([]byte(tt.in), uint64(7), uint8(0))
	}
	for i, tt := range metaReplyTests {
		f.Add([]byte(tt.req+"\r\nx\r\n"), tt.r.CAS, uint8(i))
	}
	f.Fuzz(func(t *testing.T, in []byte, n uint64, bits uint8) {
		pr := NewReader(bytes.NewReader(in), fuzzLimits)
		var req mcproto.Request
		for range len(in) + 2 {
			err := pr.Next(&req)
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return
			}
			var pe *mcproto.Error
			if errors.As(err, &pe) {
				if pe.Close {
					return
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.Echo.Proto != mcproto.Meta || req.Op == mcproto.OpNoop {
				continue
			}
			checkMetaRoundTrip(t, &req)
			for s := mcproto.StatusStored; s <= mcproto.StatusHit; s++ {
				r := mcproto.MetaReply{Status: s, CAS: n, Flags: uint32(n), TTL: int64(int32(n)), LastAccess: int64(n >> 40),
					Size: int(n % 1000), Value: bytes.Repeat([]byte{'7'}, int(n%30)),
					Fetched: bits&1 != 0, Won: bits&2 != 0, Stale: bits&4 != 0, TokenSent: bits&8 != 0, Created: bits&16 != 0}
				checkMetaReply(t, req.Echo, &r)
			}
		}
	})
}

// checkMetaRoundTrip parses the line req's echo describes and expects the
// same request.
func checkMetaRoundTrip(t *testing.T, req *mcproto.Request) {
	e := req.Echo.Meta
	key := e.Key
	if e.Base64 {
		key = []byte(base64.StdEncoding.EncodeToString(key))
	}
	line := req.Op.String() + " " + string(key)
	if req.Op == mcproto.OpMetaSet {
		line += " " + strconv.Itoa(len(req.Data))
	}
	if len(e.Flags) > 0 {
		line += " " + string(e.Flags)
	}
	line += "\r\n"
	if req.Op == mcproto.OpMetaSet {
		line += string(req.Data) + "\r\n"
	}
	want := render(req, nil)
	var again mcproto.Request
	err := NewReader(strings.NewReader(line), mcproto.Limits{MaxItemSize: fuzzLimits.MaxItemSize}).Next(&again)
	if got := render(&again, err); got != want {
		t.Fatalf("%q reads back as\n%s, not\n%s", line, got, want)
	}
}

// checkMetaReply renders r for the request e echoes and checks its shape.
func checkMetaReply(t *testing.T, e mcproto.Echo, r *mcproto.MetaReply) {
	out := string((&Codec{}).AppendMeta(nil, e, r))
	op, s := e.Op, r.Status
	dropped := e.Quiet && (op == mcproto.OpMetaGet && s == mcproto.StatusNotFound ||
		op == mcproto.OpMetaSet && s == mcproto.StatusStored || op == mcproto.OpMetaDelete && s == mcproto.StatusDeleted ||
		op == mcproto.OpMetaArith && s == mcproto.StatusHit && !r.Created)
	if (out == "") != dropped {
		t.Fatalf("%s q=%v status %d: reply %q", op, e.Quiet, s, out)
	}
	if dropped {
		return
	}
	end := strings.Index(out, "\r\n")
	if end < 0 || strings.IndexByte(out[:end], '\n') >= 0 {
		t.Fatalf("%s: reply %q is no line", op, out)
	}
	line, rest := out[:end], out[end+2:]
	if strings.HasPrefix(line, "VA ") {
		n, err := strconv.Atoi(strings.Fields(line)[1])
		if err != nil || n != len(r.Value) || rest != string(r.Value)+"\r\n" {
			t.Fatalf("%s: VA reply %q for a value of %d bytes", op, out, len(r.Value))
		}
	} else if rest != "" {
		t.Fatalf("%s: %q after the line", op, rest)
	}
	if strings.HasPrefix(line, "SERVER_ERROR") {
		return
	}
	if e.Meta.Base64 && e.Meta.HasFlag('k') && op != mcproto.OpMetaDebug {
		i := strings.Index(line, " k")
		enc, _, _ := strings.Cut(line[i+2:], " ")
		if key, err := base64.StdEncoding.DecodeString(enc); err != nil || string(key) != string(e.Meta.Key) {
			t.Fatalf("%s: k token %q for key %q", op, enc, e.Meta.Key)
		}
	}
}
