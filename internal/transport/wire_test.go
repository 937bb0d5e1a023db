package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestHandshakeCheck(t *testing.T) {
	ok := hello{Version: ProtocolVersion, ClusterID: 7, From: 1, To: 2}
	for _, tc := range []struct {
		name   string
		mutate func(*hello)
		want   uint16
	}{
		{"ok", func(*hello) {}, statusOK},
		{"version", func(h *hello) { h.Version = 2 }, statusBadVersion},
		{"flags", func(h *hello) { h.Flags = 1 }, statusBadHandshake},
		{"cluster", func(h *hello) { h.ClusterID = 8 }, statusClusterID},
		{"addressed to another node", func(h *hello) { h.To = 3 }, statusWrongNode},
		{"sender 0", func(h *hello) { h.From = 0 }, statusBadSender},
		{"sender is us", func(h *hello) { h.From = 2 }, statusBadSender},
	} {
		h := ok
		tc.mutate(&h)
		// Round-trip through the wire first.
		got, err := readHello(bytes.NewReader(h.marshal()))
		if err != nil || got != h {
			t.Fatalf("%s: round trip %+v, %v", tc.name, got, err)
		}
		if s := got.check(7, 2); s != tc.want {
			t.Errorf("%s: status %d (%s), want %d (%s)", tc.name, s, statusText(s), tc.want, statusText(tc.want))
		}
	}
	r := response{Version: 1, Status: statusClusterID, ClusterID: 9, ID: 4}
	if got, err := readResponse(bytes.NewReader(r.marshal())); err != nil || got != r {
		t.Fatalf("response round trip: %+v, %v", got, err)
	}
	// "Not a member" carries the acceptor's applied index after the 24 bytes.
	nm := response{Version: 1, Status: statusNotMember, ClusterID: 9, ID: 4, Applied: 1 << 40}
	b := nm.marshal()
	if len(b) != responseSize+8 {
		t.Fatalf("not-member response is %d bytes, want %d", len(b), responseSize+8)
	}
	if got, err := readResponse(bytes.NewReader(b)); err != nil || got != nm {
		t.Fatalf("not-member response round trip: %+v, %v", got, err)
	}
	if _, err := readResponse(bytes.NewReader(b[:responseSize+3])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("not-member response without its whole index: %v", err)
	}
	if _, err := readHello(bytes.NewReader(make([]byte, helloSize))); !errors.Is(err, errProtocol) {
		t.Fatalf("zero magic: %v", err)
	}
	if _, err := readHello(bytes.NewReader(ok.marshal()[:10])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short hello: %v", err)
	}
}

func TestFramesRoundTrip(t *testing.T) {
	var msgs []*pb.Message
	for i := range 200 {
		m := app(1, 2, uint64(i))
		m.Entries = []*pb.Entry{{Index: proto.Uint64(uint64(i)), Term: proto.Uint64(1), Data: bytes.Repeat([]byte{byte(i)}, i*7)}}
		msgs = append(msgs, m)
	}
	var enc frameEncoder
	enc.reset(4096) // small target: many frames
	for _, m := range msgs {
		if err := enc.add(m); err != nil {
			t.Fatal(err)
		}
	}
	r := bytes.NewReader(enc.bytes())
	var got []*pb.Message
	var buf []byte
	frames := 0
	for {
		body, err := readFrame(r, &buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames++
		if len(body) > 4096+binary.MaxVarintLen64+200*7 {
			t.Fatalf("frame of %d bytes exceeds the target", len(body))
		}
		if err := decodeFrame(body, func(m *pb.Message) error { got = append(got, m); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if frames < 10 {
		t.Errorf("%d frames: target not applied", frames)
	}
	if len(got) != len(msgs) {
		t.Fatalf("decoded %d messages, want %d", len(got), len(msgs))
	}
	for i := range msgs {
		if !proto.Equal(got[i], msgs[i]) {
			t.Fatalf("message %d differs:\n got %v\nwant %v", i, got[i], msgs[i])
		}
	}
}

func TestReadFrameChecksLengthBeforeAllocating(t *testing.T) {
	for _, n := range []uint32{0, MaxFrameSize + 1, 1<<32 - 1} {
		var buf []byte
		_, err := readFrame(bytes.NewReader(binary.BigEndian.AppendUint32(nil, n)), &buf)
		if !errors.Is(err, errProtocol) {
			t.Errorf("length %d: %v, want a protocol error", n, err)
		}
		if buf != nil {
			t.Errorf("length %d: allocated %d bytes", n, cap(buf))
		}
	}
	// A truncated body is an unexpected EOF, not a clean one.
	var buf []byte
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, 9, 1, 2}), &buf); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated body: %v", err)
	}
}

func TestEncoderRefusesOversizedMessage(t *testing.T) {
	m := app(1, 2, 1)
	m.Context = make([]byte, MaxFrameSize)
	var enc frameEncoder
	enc.reset(frameTarget)
	if err := enc.add(m); !errors.Is(err, errTooLarge) {
		t.Fatalf("oversized message: %v", err)
	}
	if len(enc.bytes()) != 0 {
		t.Fatal("oversized message left bytes behind")
	}
}

// FuzzDecode feeds arbitrary bytes to the frame reader and decoder: they
// must never panic, and whatever decodes must re-encode to messages that
// decode equal.
func FuzzDecode(f *testing.F) {
	var enc frameEncoder
	enc.reset(frameTarget)
	enc.add(app(1, 2, 3))
	enc.add(msg(pb.MsgHeartbeat, 1, 2, 0))
	f.Add(enc.bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 2, 5, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var buf []byte
		for {
			body, err := readFrame(r, &buf)
			if err != nil {
				return
			}
			var got []*pb.Message
			if err := decodeFrame(body, func(m *pb.Message) error { got = append(got, m); return nil }); err != nil {
				return
			}
			var e frameEncoder
			e.reset(frameTarget)
			for _, m := range got {
				if err := e.add(m); err != nil {
					t.Fatalf("re-encode: %v", err)
				}
			}
			var again []*pb.Message
			var buf2 []byte
			r2 := bytes.NewReader(e.bytes())
			for r2.Len() > 0 {
				body2, err := readFrame(r2, &buf2)
				if err != nil {
					t.Fatalf("re-read: %v", err)
				}
				if err := decodeFrame(body2, func(m *pb.Message) error { again = append(again, m); return nil }); err != nil {
					t.Fatalf("re-decode: %v", err)
				}
			}
			if len(again) != len(got) {
				t.Fatalf("re-decoded %d messages, want %d", len(again), len(got))
			}
			for i := range got {
				if !proto.Equal(got[i], again[i]) {
					t.Fatalf("message %d changed in a round trip", i)
				}
			}
		}
	})
}
