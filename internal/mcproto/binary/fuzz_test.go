package binary

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/testing/chunkread"
)

// fuzzLimits are small so that random inputs reach the size limit.
var fuzzLimits = mcproto.Limits{MaxItemSize: 64}

// FuzzDecode: random input never panics, never loops, never yields a
// request that breaks the limits or its operation's shape, answers only
// well-formed error responses, and decodes the same however the bytes are
// split.
func FuzzDecode(f *testing.F) {
	for _, tt := range decodeTests {
		f.Add(tt.in)
	}
	for _, tt := range malformed {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, lim := range []mcproto.Limits{fuzzLimits, {}} {
			whole := fuzzDecode(t, bytes.NewReader(in), len(in), lim)
			one := fuzzDecode(t, iotest.OneByteReader(bytes.NewReader(in)), len(in), lim)
			chunked := fuzzDecode(t, &chunkread.Reader{Data: in, Sizes: in, Max: 31}, len(in), lim)
			if !slices.Equal(whole, one) || !slices.Equal(whole, chunked) {
				t.Fatalf("split reads disagree (%+v):\nwhole   %q\none     %q\nchunked %q", lim, whole, one, chunked)
			}
		}
	})
}

func fuzzDecode(t *testing.T, r io.Reader, n int, lim mcproto.Limits) []string {
	c := NewCodec(r, lim)
	var out []string
	var req mcproto.Request
	// Every result but the last consumes at least a header.
	for range n/HeaderLen + 2 {
		err := c.Next(&req)
		out = append(out, describe(&req, err))
		if c.Buffered() < 0 {
			t.Fatal("negative Buffered")
		}
		if err == nil {
			checkRequest(t, &req, lim)
			continue
		}
		var pe *mcproto.Error
		if !errors.As(err, &pe) {
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("unexpected error %v", err)
			}
			return out
		}
		checkError(t, &req, pe)
		if pe.Close {
			return out
		}
	}
	t.Fatalf("no progress after %d calls: %q", n/HeaderLen+2, out)
	return nil
}

// withKey are the operations that carry exactly one key.
var withKey = map[mcproto.Op]bool{
	mcproto.OpGet: true, mcproto.OpGat: true, mcproto.OpTouch: true, mcproto.OpSet: true, mcproto.OpAdd: true,
	mcproto.OpReplace: true, mcproto.OpAppend: true, mcproto.OpPrepend: true, mcproto.OpCas: true,
	mcproto.OpIncr: true, mcproto.OpDecr: true, mcproto.OpDelete: true, mcproto.OpSASLAuth: true, mcproto.OpSASLStep: true,
}

func checkRequest(t *testing.T, req *mcproto.Request, lim mcproto.Limits) {
	e := req.Echo
	info := opcodes[e.Opcode]
	if info.op == 0 || (req.Op != info.op && !(req.Op == mcproto.OpCas && info.shape == shapeStore)) {
		t.Fatalf("opcode %#x decoded as %s", e.Opcode, req.Op)
	}
	if e.Proto != mcproto.Binary || e.Op != req.Op || e.Quiet != info.quiet || e.Noreply {
		t.Fatalf("bad echo %+v of %s", e, req.Op)
	}
	if withKey[req.Op] != (len(req.Keys) == 1) || len(req.Keys) > 1 {
		t.Fatalf("%s with %d keys", req.Op, len(req.Keys))
	}
	for _, k := range req.Keys {
		if len(k) == 0 || len(k) > mcproto.MaxKeyLen {
			t.Fatalf("key of %d bytes", len(k))
		}
	}
	lim = lim.WithDefaults()
	if len(req.Data) > lim.MaxItemSize {
		t.Fatalf("value of %d bytes over the limit", len(req.Data))
	}
	hasData := req.Op.IsStorage() || req.Op == mcproto.OpSASLAuth || req.Op == mcproto.OpSASLStep
	if hasData != (req.Data != nil) {
		t.Fatalf("%s with data %v", req.Op, req.Data != nil)
	}
	if req.Exptime < 0 || req.Exptime > 0xffffffff || req.Delay < 0 || req.Delay > 0xffffffff {
		t.Fatalf("times out of range: %d %d", req.Exptime, req.Delay)
	}
}

// knownErrors are the error responses Next may ask a server to write.
var knownErrors = map[Status]string{
	StatusUnknownCommand: MsgUnknownCommand, StatusInvalidArguments: MsgInvalidArguments, StatusTooLarge: MsgTooLarge,
}

func checkError(t *testing.T, req *mcproto.Request, pe *mcproto.Error) {
	if len(pe.Reply) == 0 {
		if !pe.Close {
			t.Fatal("an error that neither answers nor closes")
		}
		return
	}
	r, err := parseResponse(pe.Reply)
	if err != nil || len(r.rest) > 0 || r.magic != ResponseMagic || r.datatype != 0 || r.cas != 0 ||
		len(r.extras) > 0 || len(r.key) > 0 || knownErrors[r.status] != string(r.value) {
		t.Fatalf("bad error response %x (%v)", pe.Reply, err)
	}
	if r.opcode != req.Echo.Opcode || r.opaque != req.Echo.Opaque {
		t.Fatalf("error response for opcode %#x opaque %d, request's %#x %d", r.opcode, r.opaque, req.Echo.Opcode, req.Echo.Opaque)
	}
	if pe.TooLarge != (r.status == StatusTooLarge) {
		t.Fatalf("TooLarge %v with status %#x", pe.TooLarge, r.status)
	}
	if pe.TooLarge && (!req.Op.IsStorage() || len(req.Keys) != 1 || req.Data != nil) {
		t.Fatalf("too large without its request: %+v", req)
	}
	if r.status == StatusTooLarge && pe.Close || r.status == StatusInvalidArguments && !pe.Close {
		t.Fatalf("status %#x with close %v", r.status, pe.Close)
	}
}
