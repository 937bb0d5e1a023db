package transport

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// waitTimeout bounds every wait for a condition; it is a failure guard, not
// a measurement: conditions normally hold within milliseconds.
const waitTimeout = 15 * time.Second

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// msg builds a message; idx is a sequence number the tests check order with.
func msg(typ pb.MessageType, from, to, idx uint64) *pb.Message {
	return &pb.Message{
		Type:  typ.Enum(),
		From:  proto.Uint64(from),
		To:    proto.Uint64(to),
		Term:  proto.Uint64(1),
		Index: proto.Uint64(idx),
	}
}

func app(from, to, idx uint64) *pb.Message { return msg(pb.MsgApp, from, to, idx) }

type snapReport struct {
	id     uint64
	failed bool
}

// recorder is a Handler that records everything it is given.
type recorder struct {
	mu          sync.Mutex
	got         map[uint64][]uint64 // sender → indexes stepped, in order
	at          map[uint64][]time.Time
	unreachable map[uint64]int
	snaps       []snapReport
	stepErr     func(*pb.Message) error
	block       chan struct{} // when non-nil, Step waits for it to close
}

func newRecorder() *recorder {
	return &recorder{
		got:         make(map[uint64][]uint64),
		at:          make(map[uint64][]time.Time),
		unreachable: make(map[uint64]int),
	}
}

func (r *recorder) Step(ctx context.Context, m *pb.Message) error {
	r.mu.Lock()
	block := r.block
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[m.GetFrom()] = append(r.got[m.GetFrom()], m.GetIndex())
	r.at[m.GetFrom()] = append(r.at[m.GetFrom()], time.Now())
	if r.stepErr != nil {
		return r.stepErr(m)
	}
	return nil
}

func (r *recorder) ReportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreachable[id]++
}

func (r *recorder) ReportSnapshot(id uint64, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, snapReport{id, failed})
}

func (r *recorder) from(id uint64) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.got[id]...)
}

func (r *recorder) count(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[id])
}

func (r *recorder) unreachableCount(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable[id]
}

func (r *recorder) hasSnap(want snapReport) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.snaps {
		if s == want {
			return true
		}
	}
	return false
}

// checkSequence fails unless got is exactly 1..n.
func checkSequence(t testing.TB, who string, got []uint64, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%s: got %d messages, want %d", who, len(got), n)
	}
	for i, idx := range got {
		if idx != uint64(i+1) {
			t.Fatalf("%s: message %d has index %d, want %d (reordered or lost)", who, i, idx, i+1)
		}
	}
}

// logBuffer collects log output for assertions; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.buf.String(), s)
}

func newLogger(w *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// transportGoroutines counts goroutines running transport code (not tests).
func transportGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"transport.(*TCP)", "transport.(*peer)", "transport.(*writer)",
			"transport.(*reporter)", "transport.(*MemTransport)", "transport.dialPeer",
			"transport.(*snapshotter)"} {
			if strings.Contains(g, fn) {
				count++
				break
			}
		}
	}
	return count
}

// checkNoLeak registers a cleanup, run after those registered later (the
// Closes), that waits for every transport goroutine to exit. It polls
// because a goroutine that has called wg.Done is still on its way out when
// Close returns (goleak retries for the same reason).
func checkNoLeak(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		waitFor(t, "transport goroutines to exit", func() bool { return transportGoroutines() == 0 })
	})
}

// fastConfig is a config for tests: loopback, short backoff.
func fastConfig(cluster, id uint64, peers map[uint64]string) Config {
	return Config{
		ClusterID:  cluster,
		LocalID:    id,
		ListenAddr: "127.0.0.1:0",
		Peers:      peers,
		MaxBackoff: 100 * time.Millisecond,
	}
}

// newTCP builds and starts a transport that is closed when the test ends.
func newTCP(t testing.TB, cfg Config, h Handler, logger *slog.Logger) *TCP {
	t.Helper()
	tr, err := NewTCP(cfg, h, logger)
	if err != nil {
		t.Fatal(err)
	}
	tr.Start()
	t.Cleanup(func() { tr.Close() })
	return tr
}
