package transport

import (
	"context"
	"crypto/tls"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/testing/testpki"
	"github.com/kvd-project/kvd/internal/tlsconf"
)

// countingHandler counts stepped messages and wakes the sender every
// wakeEvery of them and when the count reaches target.
type countingHandler struct {
	n, target atomic.Int64
	wake      chan struct{}
}

const wakeEvery = 256

func (h *countingHandler) Step(_ context.Context, _ *pb.Message) error {
	if n := h.n.Add(1); n%wakeEvery == 0 || n == h.target.Load() {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *countingHandler) ReportUnreachable(uint64)    {}
func (h *countingHandler) ReportSnapshot(uint64, bool) {}

// BenchmarkTCPSend measures one link's throughput with MsgApp messages of
// about 600 bytes (one 576-byte entry), sent in Ready-sized batches of 64.
// The sender keeps at most half a queue in flight so nothing is dropped.
func BenchmarkTCPSend(b *testing.B) {
	benchmarkSend(b, fastConfig(7, 1, nil), fastConfig(7, 2, nil))
}

// BenchmarkTCPSendTLS is BenchmarkTCPSend over peer mutual TLS: the cost
// of the record layer, and no allocations per message beyond plaintext's.
func BenchmarkTCPSendTLS(b *testing.B) {
	ca := testpki.NewCA(b, "peer-ca")
	peer := func(name string) *tlsconf.Peer {
		f := testpki.WriteFiles(b, b.TempDir(), name, ca, ca.Issue(b, testpki.Leaf{DNS: []string{name}}))
		src, err := tlsconf.Load(tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, nil)
		if err != nil {
			b.Fatal(err)
		}
		p, err := tlsconf.NewPeer(src, tls.VersionTLS13)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	benchmarkSend(b, withTLS(fastConfig(7, 1, nil), peer("m1")), withTLS(fastConfig(7, 2, nil), peer("m2")))
}

func benchmarkSend(b *testing.B, cfg1, cfg2 Config) {
	h := &countingHandler{wake: make(chan struct{}, 1)}
	t2 := newTCP(b, cfg2, h, nil)
	cfg1.Peers = map[uint64]string{2: t2.Addr()}
	t1 := newTCP(b, cfg1, &countingHandler{wake: make(chan struct{}, 1)}, nil)

	const batch = 64
	window := int64(DefaultQueueSize / 2)
	msgs := make([]*pb.Message, batch)
	for i := range msgs {
		m := app(1, 2, uint64(i))
		m.LogTerm, m.Commit = proto.Uint64(1), proto.Uint64(uint64(i))
		m.Entries = []*pb.Entry{{Term: proto.Uint64(1), Index: proto.Uint64(uint64(i + 1)), Data: make([]byte, 576)}}
		msgs[i] = m
	}
	h.target.Store(int64(b.N))
	b.SetBytes(int64(proto.Size(msgs[0])))
	b.ResetTimer()
	sent := int64(0)
	for sent < int64(b.N) {
		k := min(batch, int64(b.N)-sent)
		for sent+k-h.n.Load() > window {
			<-h.wake
		}
		t1.Send(msgs[:k])
		sent += k
	}
	for h.n.Load() < int64(b.N) {
		<-h.wake
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	if d := t1.Stats().Peers[2].Dropped; d != 0 {
		b.Fatalf("%d messages dropped", d)
	}
}
