package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func snapMsg(from, to, index uint64) *pb.Message {
	m := msg(pb.MsgSnap, from, to, index)
	m.Snapshot = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index: proto.Uint64(index), Term: proto.Uint64(3),
		ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}},
	}}
	return m
}

// memSink collects decoded files in memory (tests only: files are small).
type memSink struct {
	mu    sync.Mutex
	files map[string]*bytes.Buffer
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
func (nopCloser) abort()       {}

func (s *memSink) create(name string) (sinkFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		s.files = map[string]*bytes.Buffer{}
	}
	b := new(bytes.Buffer)
	s.files[name] = b
	return nopCloser{b}, nil
}

// discardSink drops file bytes: the decoder's work without disk or memory.
type discardSink struct{}

func (discardSink) create(string) (sinkFile, error) { return nopCloser{io.Discard}, nil }

func writeFiles(t testing.TB, dir string, files map[string][]byte) []string {
	t.Helper()
	var names []string
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// encodeStream returns the stream for m and files, as the sender writes it.
func encodeStream(t testing.TB, m *pb.Message, files map[string][]byte) []byte {
	t.Helper()
	dir := t.TempDir()
	names := writeFiles(t, dir, files)
	var buf bytes.Buffer
	if _, err := writeSnapshotStream(&buf, m, dir, names); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotStreamRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 100_000) // > the copy buffer
	files := map[string][]byte{"000001.sst": big, "MANIFEST-000002": []byte("manifest"), "empty.log": nil}
	stream := encodeStream(t, snapMsg(1, 2, 42), files)
	var sink memSink
	m, sum, err := readSnapshotStream(bytes.NewReader(stream), &sink)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetType() != pb.MsgSnap || m.GetSnapshot().GetMetadata().GetIndex() != 42 || m.GetFrom() != 1 {
		t.Fatalf("message: %v", m)
	}
	if sum.files != 3 || sum.bytes != uint64(len(big)+8) {
		t.Fatalf("summary %+v", sum)
	}
	for name, want := range files {
		if got := sink.files[name]; got == nil || !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("file %s differs", name)
		}
	}
}

// TestSnapshotStreamRejects flips, cuts and forges streams: each must be an
// error (never a panic, never a silent success).
func TestSnapshotStreamRejects(t *testing.T) {
	files := map[string][]byte{"a.sst": []byte("hello, snapshot"), "b": []byte("second")}
	good := encodeStream(t, snapMsg(1, 2, 7), files)
	msgLen := int(binary.BigEndian.Uint32(good[8:]))
	firstFile := 12 + msgLen // tag of the first file record
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := map[string][]byte{
		"empty":          nil,
		"bad magic":      mutate(func(b []byte) []byte { b[0] = 'x'; return b }),
		"bad version":    mutate(func(b []byte) []byte { b[5] = 9; return b }),
		"flags":          mutate(func(b []byte) []byte { b[7] = 1; return b }),
		"zero msg len":   mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 0); return b }),
		"huge msg len":   mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], maxSnapMsgSize+1); return b }),
		"bad tag":        mutate(func(b []byte) []byte { b[firstFile] = 'X'; return b }),
		"flipped data":   mutate(func(b []byte) []byte { b[firstFile+1+2+5+8] ^= 1; return b }),
		"name traversal": mutate(func(b []byte) []byte { copy(b[firstFile+3:], "../ss"); return b }),
		"name slash":     mutate(func(b []byte) []byte { b[firstFile+3+1] = '/'; return b }),
		"huge size":      mutate(func(b []byte) []byte { b[firstFile+3+5] = 0xff; return b }),
		"zero name":      mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[firstFile+1:], 0); return b }),
		"end count":      mutate(func(b []byte) []byte { b[len(b)-12+3]++; return b }),
		"end bytes":      mutate(func(b []byte) []byte { b[len(b)-1]++; return b }),
		"no end":         good[:len(good)-13],
		"truncated file": good[:firstFile+20],
	}
	// A MsgApp where the MsgSnap belongs.
	app := encodeStream(t, app(1, 2, 5), nil)
	cases["not a MsgSnap"] = app
	// The same file twice.
	dup := bytes.Clone(good[:firstFile])
	rec := good[firstFile : len(good)-13]
	first := rec[:1+2+5+8+15+4] // "a.sst", 15 bytes
	dup = append(append(append(dup, first...), first...), snapTagEnd)
	dup = binary.BigEndian.AppendUint32(dup, 2)
	dup = binary.BigEndian.AppendUint64(dup, 30)
	cases["duplicate"] = dup
	for name, stream := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := readSnapshotStream(bytes.NewReader(stream), discardSink{})
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, errProtocol) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error neither a protocol violation nor a cut stream: %v", err)
			}
		})
	}
}

func TestValidFileName(t *testing.T) {
	for name, want := range map[string]bool{
		"000123.sst": true, "MANIFEST-000001": true, "marker.format-version.000001.013": true,
		"": false, ".": false, "..": false, "a/b": false, `a\b`: false, "a\x00": false, "ü": false,
		strings.Repeat("a", 256): false,
	} {
		if got := validFileName(name); got != want {
			t.Errorf("validFileName(%q) = %v", name, got)
		}
	}
}

func TestIncomingSnapshotDir(t *testing.T) {
	if d, err := IncomingSnapshotDir("/data", []byte(incomingRefPrefix+"2-17")); err != nil || d != filepath.Join("/data", incomingDir, "2-17") {
		t.Fatalf("got %q, %v", d, err)
	}
	for _, ref := range []string{"", "2-17", incomingRefPrefix, incomingRefPrefix + "../state", incomingRefPrefix + "a/b"} {
		if _, err := IncomingSnapshotDir("/data", []byte(ref)); err == nil {
			t.Errorf("accepted %q", ref)
		}
	}
}

// dirSource is a SnapshotSource that "checkpoints" fixed files.
type dirSource struct {
	files   map[string][]byte
	applied uint64
	err     error
}

func (s *dirSource) Checkpoint(dir string, _ NodeID) (uint64, error) {
	if s.err != nil {
		return 0, s.err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return 0, err
	}
	for name, data := range s.files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return 0, err
		}
	}
	return s.applied, nil
}

// snapRecorder keeps the MsgSnaps it is handed, with the files they point to.
type snapRecorder struct {
	*recorder
	dataDir string
	mu      sync.Mutex
	got     []map[string][]byte
	idx     []uint64
}

func (r *snapRecorder) Step(ctx context.Context, m *pb.Message) error {
	if m.GetType() == pb.MsgSnap {
		dir, err := IncomingSnapshotDir(r.dataDir, m.GetSnapshot().GetData())
		if err != nil {
			return err
		}
		files := map[string][]byte{}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return err
			}
			files[e.Name()] = b
		}
		r.mu.Lock()
		r.got = append(r.got, files)
		r.idx = append(r.idx, m.GetSnapshot().GetMetadata().GetIndex())
		r.mu.Unlock()
	}
	return r.recorder.Step(ctx, m)
}

func (r *snapRecorder) snaps() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func streamingConfig(t *testing.T, id uint64, peers map[uint64]string, src SnapshotSource) Config {
	cfg := fastConfig(7, id, peers)
	cfg.Snapshots = src
	cfg.SnapshotDir = t.TempDir()
	return cfg
}

func TestTCPSnapshotStream(t *testing.T) {
	checkNoLeak(t)
	big := bytes.Repeat([]byte{0xab}, 3<<20)
	src := &dirSource{files: map[string][]byte{"000007.sst": big, "MANIFEST-000001": []byte("m")}, applied: 120}
	cfg2 := streamingConfig(t, 2, nil, &dirSource{})
	rec2 := &snapRecorder{recorder: newRecorder(), dataDir: cfg2.SnapshotDir}
	t2 := newTCP(t, cfg2, rec2, nil)
	rec1 := newRecorder()
	cfg1 := streamingConfig(t, 1, map[uint64]string{2: t2.Addr()}, src)
	t1 := newTCP(t, cfg1, rec1, nil)

	t1.Send([]*pb.Message{app(1, 2, 1), snapMsg(1, 2, 100)})
	waitFor(t, "snapshot streamed and reported", func() bool {
		return rec2.snaps() == 1 && rec1.hasSnap(snapReport{2, false})
	})
	rec2.mu.Lock()
	got := rec2.got[0]
	rec2.mu.Unlock()
	if len(got) != 2 || !bytes.Equal(got["000007.sst"], big) || string(got["MANIFEST-000001"]) != "m" {
		t.Fatalf("received files differ (%d files)", len(got))
	}
	if s := t1.Stats().Snapshots; s.Sent != 1 || s.BytesSent != uint64(len(big)+1) || s.SendFailures != 0 {
		t.Fatalf("sender stats %+v", s)
	}
	if s := t2.Stats().Snapshots; s.Received != 1 || s.BytesReceived != uint64(len(big)+1) {
		t.Fatalf("receiver stats %+v", s)
	}
	// The sender's checkpoint is gone once sent.
	if ents, _ := os.ReadDir(filepath.Join(cfg1.SnapshotDir, outgoingDir)); len(ents) != 0 {
		t.Fatalf("outgoing checkpoints left behind: %v", ents)
	}

	// A state store behind the snapshot index is never shipped.
	src.applied = 50
	t1.Send([]*pb.Message{snapMsg(1, 2, 100)})
	waitFor(t, "refused send reported", func() bool { return rec1.hasSnap(snapReport{2, true}) })
	if rec2.snaps() != 1 {
		t.Fatal("a snapshot behind its index was shipped")
	}

	// A receiver that cannot hand the snapshot over refuses it: the sender
	// reports failure and the received files are removed.
	rec2.recorder.mu.Lock()
	rec2.recorder.stepErr = func(m *pb.Message) error {
		if m.GetType() == pb.MsgSnap {
			return errors.New("replica stopping")
		}
		return nil
	}
	rec2.recorder.mu.Unlock()
	src.applied = 200
	t1.Send([]*pb.Message{snapMsg(1, 2, 100)})
	waitFor(t, "refused stream counted", func() bool {
		return t2.Stats().Snapshots.ReceiveFailures == 1 && t1.Stats().Snapshots.SendFailures == 2
	})
	if ents, _ := os.ReadDir(filepath.Join(cfg2.SnapshotDir, incomingDir)); len(ents) != 1 {
		t.Fatalf("incoming dirs %v: want only the first, accepted, one", ents)
	}
}

func TestTCPSnapshotStreamRefusedWithoutStreaming(t *testing.T) {
	checkNoLeak(t)
	// The receiver does not stream snapshots: it refuses the stream's
	// handshake, and the sender reports the snapshot failed.
	t2 := newTCP(t, fastConfig(7, 2, nil), newRecorder(), nil)
	rec1 := newRecorder()
	src := &dirSource{files: map[string][]byte{"x": []byte("y")}, applied: 10}
	t1 := newTCP(t, streamingConfig(t, 1, map[uint64]string{2: t2.Addr()}, src), rec1, nil)
	t1.Send([]*pb.Message{snapMsg(1, 2, 10)})
	waitFor(t, "failed snapshot report", func() bool { return rec1.hasSnap(snapReport{2, true}) })
	if s := t1.Stats().Snapshots; s.SendFailures != 1 || s.Sent != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTCPMsgSnapOnMessageConnectionRefused(t *testing.T) {
	checkNoLeak(t)
	// A legacy sender (no streaming) writes MsgSnap on its message
	// connection; a streaming receiver must not step it (it has no state).
	cfg2 := streamingConfig(t, 2, nil, &dirSource{})
	rec2 := newRecorder()
	t2 := newTCP(t, cfg2, rec2, nil)
	t1 := newTCP(t, fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), newRecorder(), nil)
	t1.Send([]*pb.Message{app(1, 2, 1), snapMsg(1, 2, 2)})
	waitFor(t, "MsgApp stepped", func() bool { return rec2.count(1) >= 1 })
	// The MsgSnap closed that connection; a message after it needs another.
	t1.Send([]*pb.Message{app(1, 2, 3)})
	waitFor(t, "reconnect", func() bool {
		if got := rec2.from(1); got[len(got)-1] == 3 {
			return true
		}
		t1.Send([]*pb.Message{app(1, 2, 3)})
		time.Sleep(10 * time.Millisecond)
		return false
	})
	if d := t1.Stats().Peers[2].Dials; d < 2 {
		t.Fatalf("connection not closed by the MsgSnap (%d dials)", d)
	}
	for _, idx := range rec2.from(1) {
		if idx == 2 {
			t.Fatal("MsgSnap from a message connection was stepped")
		}
	}
}

func FuzzReadSnapshotStream(f *testing.F) {
	f.Add(encodeStream(f, snapMsg(1, 2, 9), map[string][]byte{"a": []byte("abc"), "MANIFEST-1": []byte("m")}))
	f.Add(encodeStream(f, snapMsg(1, 2, 9), nil))
	f.Add([]byte("kvdS\x00\x01\x00\x00\x00\x00\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, sum, err := readSnapshotStream(bytes.NewReader(data), discardSink{})
		if err != nil {
			return
		}
		if m.GetType() != pb.MsgSnap || sum.files > maxSnapFiles {
			t.Fatalf("accepted %v with %+v", m.GetType(), sum)
		}
	})
}

func BenchmarkSnapshotStream(b *testing.B) {
	dir := b.TempDir()
	names := writeFiles(b, dir, map[string][]byte{"000001.sst": bytes.Repeat([]byte{1}, 64<<20)})
	m := snapMsg(1, 2, 9)
	b.SetBytes(64 << 20)
	for b.Loop() {
		pr, pw := io.Pipe()
		go func() {
			_, err := writeSnapshotStream(pw, m, dir, names)
			pw.CloseWithError(err)
		}()
		if _, _, err := readSnapshotStream(pr, discardSink{}); err != nil {
			b.Fatal(err)
		}
	}
}

// recordingSink notes which files were made durable (Close, which fsyncs
// in dirSink) and which were given up (abort).
type recordingSink struct {
	mu              sync.Mutex
	closed, aborted []string
}

type recordingFile struct {
	io.Writer
	s    *recordingSink
	name string
}

func (f recordingFile) Close() error {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	f.s.closed = append(f.s.closed, f.name)
	return nil
}

func (f recordingFile) abort() {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	f.s.aborted = append(f.s.aborted, f.name)
}

func (s *recordingSink) create(name string) (sinkFile, error) {
	return recordingFile{Writer: io.Discard, s: s, name: name}, nil
}

// TestSnapshotStreamFailedFileNotSynced: a file the stream breaks off in,
// or whose checksum is wrong, is about to be deleted with its directory;
// fsyncing it first only delays the failure (and Close, which waits for
// the receive) by flushing up to a whole file of doomed data.
func TestSnapshotStreamFailedFileNotSynced(t *testing.T) {
	files := map[string][]byte{"a.sst": bytes.Repeat([]byte("x"), 1000)}
	good := encodeStream(t, snapMsg(1, 2, 7), files)
	msgLen := int(binary.BigEndian.Uint32(good[8:]))
	firstFile := 12 + msgLen
	flipped := bytes.Clone(good)
	flipped[firstFile+1+2+5+8+10] ^= 1
	for name, stream := range map[string][]byte{
		"cut mid-file":   good[:firstFile+1+2+5+8+500],
		"cut before crc": good[:firstFile+1+2+5+8+1000],
		"bad checksum":   flipped,
	} {
		t.Run(name, func(t *testing.T) {
			sink := &recordingSink{}
			if _, _, err := readSnapshotStream(bytes.NewReader(stream), sink); err == nil {
				t.Fatal("accepted")
			}
			if len(sink.closed) != 0 || len(sink.aborted) != 1 {
				t.Fatalf("failed file: synced %v, aborted %v; want it aborted, not synced", sink.closed, sink.aborted)
			}
		})
	}
	sink := &recordingSink{}
	if _, _, err := readSnapshotStream(bytes.NewReader(good), sink); err != nil {
		t.Fatal(err)
	}
	if len(sink.closed) != 1 || len(sink.aborted) != 0 {
		t.Fatalf("good file: synced %v, aborted %v; want it synced", sink.closed, sink.aborted)
	}
}
