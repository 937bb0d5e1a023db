package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// cluster builds n started TCP transports (IDs 1..n) that know each other.
func cluster(t *testing.T, n int, clusterID uint64) ([]*TCP, []*recorder) {
	t.Helper()
	trs := make([]*TCP, n)
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = newRecorder()
		tr, err := NewTCP(fastConfig(clusterID, uint64(i+1), nil), recs[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trs[i] = tr
	}
	for i, a := range trs {
		for j, b := range trs {
			if i != j {
				a.AddPeer(uint64(j+1), b.Addr())
			}
		}
	}
	for _, tr := range trs {
		tr.Start()
	}
	return trs, recs
}

func TestTCPDeliversInOrderWithoutLoss(t *testing.T) {
	checkNoLeak(t)
	const n = 3000
	trs, recs := cluster(t, 3, 7)
	rng := rand.New(rand.NewPCG(1, 2))
	// Every node sends n messages to each other node, in Send calls of
	// random sizes that interleave destinations, like a Ready's Messages.
	next := make(map[[2]uint64]uint64)
	for {
		progress := false
		for i, tr := range trs {
			from := uint64(i + 1)
			var batch []*pb.Message
			for range 1 + rng.IntN(40) {
				to := uint64(1 + rng.IntN(3))
				if to == from || next[[2]uint64{from, to}] == n {
					continue
				}
				next[[2]uint64{from, to}]++
				batch = append(batch, app(from, to, next[[2]uint64{from, to}]))
			}
			if len(batch) > 0 {
				tr.Send(batch)
				progress = true
			}
		}
		if !progress && len(next) == 6 {
			break
		}
	}
	for i, rec := range recs {
		for j := range trs {
			if i == j {
				continue
			}
			waitFor(t, "all messages delivered", func() bool { return rec.count(uint64(j+1)) >= n })
			checkSequence(t, fmt.Sprintf("node %d → node %d", j+1, i+1), rec.from(uint64(j+1)), n)
		}
	}
	for i, tr := range trs {
		// Sent is counted once Write returns, which may be after delivery.
		waitFor(t, "send counters", func() bool {
			for _, ps := range tr.Stats().Peers {
				if ps.Sent < n {
					return false
				}
			}
			return true
		})
		for id, ps := range tr.Stats().Peers {
			if ps.Sent != n || ps.Dropped != 0 || !ps.Connected || ps.Received != n {
				t.Errorf("node %d peer %d stats %+v, want sent=received=%d, no drops, connected", i+1, id, ps, n)
			}
			if ps.RTT <= 0 {
				t.Errorf("node %d peer %d: RTT not measured", i+1, id)
			}
		}
	}
}

// restartablePair is node 1 dialling node 2, whose transport the test
// closes itself (newTCP's cleanup would close it a second time).
func restartablePair(t *testing.T) (*TCP, *recorder, *TCP, *recorder) {
	t.Helper()
	rec1, rec2 := newRecorder(), newRecorder()
	t2, err := NewTCP(fastConfig(7, 2, nil), rec2, nil)
	if err != nil {
		t.Fatal(err)
	}
	t2.Start()
	t1 := newTCP(t, fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), rec1, nil)
	return t1, rec1, t2, rec2
}

func TestTCPReconnectsAfterPeerRestart(t *testing.T) {
	checkNoLeak(t)
	t1, rec1, t2, rec2 := restartablePair(t)
	addr := t2.Addr()

	idx := uint64(0)
	send := func() { idx++; t1.Send([]*pb.Message{app(1, 2, idx)}) }
	waitFor(t, "first delivery", func() bool { send(); return rec2.count(1) > 0 })
	if !t1.Connected(2) || t1.Connected(3) {
		t.Errorf("Connected(2) = %v, Connected(3) = %v: want the live peer connected, an unknown one not", t1.Connected(2), t1.Connected(3))
	}

	if err := t2.Close(); err != nil {
		t.Fatal(err)
	}
	// While 2 is down, 1 keeps sending; it must notice and report it.
	waitFor(t, "peer 2 reported unreachable", func() bool {
		send()
		return rec1.unreachableCount(2) > 0 && !t1.Stats().Peers[2].Connected && !t1.Connected(2)
	})

	rec2b := newRecorder()
	cfg := fastConfig(7, 2, nil)
	cfg.ListenAddr = addr // same address, as after a process restart
	t2b := newTCP(t, cfg, rec2b, nil)
	_ = t2b
	waitFor(t, "delivery after restart", func() bool { send(); return rec2b.count(1) > 0 })
	got := rec2b.from(1)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("out of order after reconnect: %v", got)
		}
	}
	// Messages sent while it was down may have been dropped, or none: the
	// closed connection is noticed by its reader, often before the next
	// send.
	if s := t1.Stats().Peers[2]; s.Dials < 2 || !s.Connected || !t1.Connected(2) {
		t.Errorf("stats after outage %+v (Connected %v): want a redial, connected", s, t1.Connected(2))
	}
}

// TestTCPFirstMessageAfterQuietPeerRestart: a peer restarts while nothing
// is sent to it (a follower restarted, as its fellow follower sees it). The
// first message sent after the restart must arrive: the dead connection was
// noticed when the peer closed it, not by losing that message.
func TestTCPFirstMessageAfterQuietPeerRestart(t *testing.T) {
	checkNoLeak(t)
	t1, _, t2, rec2 := restartablePair(t)
	addr := t2.Addr()
	t1.Send([]*pb.Message{app(1, 2, 1)})
	waitFor(t, "first delivery", func() bool { return rec2.count(1) == 1 })

	if err := t2.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the closed connection noticed without a write", func() bool { return !t1.Connected(2) })
	rec2b := newRecorder()
	cfg := fastConfig(7, 2, nil)
	cfg.ListenAddr = addr
	newTCP(t, cfg, rec2b, nil)
	t1.Send([]*pb.Message{app(1, 2, 2)})
	waitFor(t, "the one message sent after the restart", func() bool { return rec2b.count(1) == 1 })
}

func TestTCPRefusesMismatchedHandshake(t *testing.T) {
	for _, tc := range []struct {
		name             string
		cluster1, target uint64 // node 1's cluster ID and the ID it believes node 2 has
		reason           string
	}{
		{"cluster ID mismatch", 8, 2, "cluster ID mismatch"},
		{"wrong node", 7, 3, "wrong node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeak(t)
			var log1, log2 logBuffer
			rec1, rec2 := newRecorder(), newRecorder()
			t2 := newTCP(t, fastConfig(7, 2, nil), rec2, newLogger(&log2))
			t1 := newTCP(t, fastConfig(tc.cluster1, 1, map[uint64]string{tc.target: t2.Addr()}), rec1, newLogger(&log1))
			waitFor(t, "refusal logged on both sides and reported", func() bool {
				t1.Send([]*pb.Message{app(1, tc.target, 1)})
				return rec1.unreachableCount(tc.target) > 0 &&
					log1.contains("peer refused our connection") && log1.contains(tc.reason) &&
					log2.contains("level=WARN msg=\"refused peer connection\"") && log2.contains(tc.reason)
			})
			if n := rec2.count(1); n != 0 {
				t.Fatalf("refused peer delivered %d messages", n)
			}
			if s := t1.Stats().Peers[tc.target]; s.Sent != 0 || s.DialFailures == 0 || s.Connected {
				t.Fatalf("stats %+v: want no sends, dial failures, not connected", s)
			}
		})
	}
}

// blackhole is a listener that never accepts: dials succeed (the kernel
// queues them) but handshakes never get an answer.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func TestTCPQueueFullDropsAndReportsUnreachable(t *testing.T) {
	checkNoLeak(t)
	rec := newRecorder()
	cfg := fastConfig(7, 1, map[uint64]string{2: blackhole(t)})
	cfg.QueueSize = 4
	cfg.DialTimeout = time.Minute // the writer stays stuck in the handshake
	tr := newTCP(t, cfg, rec, nil)

	msgs := make([]*pb.Message, 100)
	for i := range msgs {
		msgs[i] = app(1, 2, uint64(i+1))
	}
	tr.Send(msgs)
	// At most QueueSize queued plus one taken by the writer: the rest are
	// dropped synchronously by Send.
	if d := tr.Stats().Peers[2].Dropped; d < 95 {
		t.Fatalf("dropped %d of 100 with a queue of 4, want >= 95", d)
	}
	waitFor(t, "unreachable report", func() bool { return rec.unreachableCount(2) > 0 })

	// The queue is full (the writer took at most one message); a MsgSnap
	// dropped there is a failed snapshot.
	waitFor(t, "failed snapshot report", func() bool {
		tr.Send([]*pb.Message{msg(pb.MsgSnap, 1, 2, 101)})
		return rec.hasSnap(snapReport{2, true})
	})
}

func TestTCPCloseIsPromptWithUnreachablePeers(t *testing.T) {
	checkNoLeak(t)
	// A port with nothing listening (dials fail fast) and a blackhole
	// (dials hang in the handshake); timeouts far longer than the test.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()
	cfg := fastConfig(7, 1, map[uint64]string{2: closedAddr, 3: blackhole(t)})
	cfg.DialTimeout, cfg.WriteTimeout = time.Hour, time.Hour
	tr, err := NewTCP(cfg, newRecorder(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.Start()
	waitFor(t, "dials to both peers", func() bool {
		tr.Send([]*pb.Message{app(1, 2, 1), app(1, 3, 1)})
		s := tr.Stats()
		return s.Peers[2].DialFailures > 0 && s.Peers[3].Dials > 0
	})
	done := make(chan error, 1)
	go func() { done <- tr.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Close blocked behind an unreachable peer")
	}
	tr.Send([]*pb.Message{app(1, 2, 2)}) // after Close: dropped, no panic
	if tr.Stats().UnknownDropped == 0 {
		t.Error("send after Close not counted as dropped")
	}
}

// rawPeer opens a connection to addr and, if hello is true, completes a
// valid handshake as node 1 of cluster 7 addressing node 2.
func rawPeer(t *testing.T, addr string, handshake bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitTimeout))
	if handshake {
		if _, err := c.Write(hello{Version: ProtocolVersion, ClusterID: 7, From: 1, To: 2}.marshal()); err != nil {
			t.Fatal(err)
		}
		r, err := readResponse(c)
		if err != nil || r.Status != statusOK {
			t.Fatalf("handshake: %+v, %v", r, err)
		}
	}
	return c
}

func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func encodedMsg(t *testing.T, m *pb.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.AppendUvarint(nil, uint64(len(b))), b...)
}

func TestTCPMalformedInputClosesOnlyThatConnection(t *testing.T) {
	checkNoLeak(t)
	var logs logBuffer
	rec := newRecorder()
	t2 := newTCP(t, fastConfig(7, 2, nil), rec, newLogger(&logs))
	for _, tc := range []struct {
		name      string
		handshake bool
		data      []byte
	}{
		{"bad magic", false, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"bad version", false, hello{Version: 9, ClusterID: 7, From: 1, To: 2}.marshal()},
		{"reserved flags", false, hello{Version: 1, Flags: 1, ClusterID: 7, From: 1, To: 2}.marshal()},
		{"sender is receiver", false, hello{Version: 1, ClusterID: 7, From: 2, To: 2}.marshal()},
		{"zero length frame", true, []byte{0, 0, 0, 0}},
		{"oversized frame", true, []byte{0xff, 0xff, 0xff, 0xff}},
		{"frame just over the limit", true, binary.BigEndian.AppendUint32(nil, MaxFrameSize+1)},
		{"bad length prefix", true, frame([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})},
		{"message longer than frame", true, frame([]byte{50, 1, 2, 3})},
		{"not a protobuf", true, frame([]byte{3, 0xff, 0xff, 0xff})},
		{"wrong sender in message", true, frame(encodedMsg(t, app(3, 2, 1)))},
		{"wrong receiver in message", true, frame(encodedMsg(t, app(1, 3, 1)))},
	} {
		c := rawPeer(t, t2.Addr(), tc.handshake)
		if _, err := c.Write(tc.data); err != nil {
			t.Fatalf("%s: write: %v", tc.name, err)
		}
		// The transport must close the connection: reads end with EOF or
		// a reset, not the guard deadline.
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: connection left open", tc.name)
		}
	}
	if n := rec.count(1) + rec.count(3); n != 0 {
		t.Fatalf("malformed input delivered %d messages", n)
	}
	if !logs.contains("frame length 4294967295 outside") || !logs.contains("bad handshake magic") {
		t.Errorf("rejections not logged:\n%s", logs.buf.String())
	}
	// The transport carries on: a proper peer still gets through, and a raw
	// one that follows the format does too.
	c := rawPeer(t, t2.Addr(), true)
	if _, err := c.Write(frame(append(encodedMsg(t, app(1, 2, 1)), encodedMsg(t, app(1, 2, 2))...))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "well-formed raw frame delivered", func() bool { return rec.count(1) == 2 })
	c.Close()
	t1 := newTCP(t, fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), newRecorder(), nil)
	t1.Send([]*pb.Message{app(1, 2, 3)})
	waitFor(t, "delivery from a real peer", func() bool { return rec.count(1) == 3 })
	checkSequence(t, "1 → 2", rec.from(1), 3)
}

func TestTCPMembershipChanges(t *testing.T) {
	checkNoLeak(t)
	rec1, rec2 := newRecorder(), newRecorder()
	t1 := newTCP(t, fastConfig(7, 1, nil), rec1, nil)
	t2 := newTCP(t, fastConfig(7, 2, nil), rec2, nil)

	t1.Send([]*pb.Message{app(1, 2, 1)})
	if s := t1.Stats(); s.UnknownDropped != 1 || len(s.Peers) != 0 {
		t.Fatalf("send to unknown peer: stats %+v", s)
	}
	waitFor(t, "unknown peer reported unreachable", func() bool { return rec1.unreachableCount(2) > 0 })

	t1.AddPeer(2, t2.Addr())
	t1.AddPeer(1, "127.0.0.1:1") // self: ignored
	t1.Send([]*pb.Message{app(1, 2, 2)})
	waitFor(t, "delivery to added peer", func() bool { return rec2.count(1) == 1 })

	// Node 2 moves to a new address.
	rec2b := newRecorder()
	t2b := newTCP(t, fastConfig(7, 2, nil), rec2b, nil)
	t1.AddPeer(2, t2b.Addr())
	waitFor(t, "delivery to the new address", func() bool {
		t1.Send([]*pb.Message{app(1, 2, 3)})
		return rec2b.count(1) > 0
	})
	if s := t1.Stats().Peers[2]; s.Addr != t2b.Addr() || s.Sent < 2 {
		t.Fatalf("after address change: %+v (counters must survive)", s)
	}

	t1.RemovePeer(2)
	before := t1.Stats().UnknownDropped
	t1.Send([]*pb.Message{app(1, 2, 4)})
	if s := t1.Stats(); len(s.Peers) != 0 || s.UnknownDropped != before+1 {
		t.Fatalf("after RemovePeer: %+v", s)
	}
	t1.RemovePeer(2) // unknown: no-op
}

func TestTCPSnapshotReports(t *testing.T) {
	checkNoLeak(t)
	rec1, rec2 := newRecorder(), newRecorder()
	t2 := newTCP(t, fastConfig(7, 2, nil), rec2, nil)
	t1 := newTCP(t, fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), rec1, nil)
	snap := msg(pb.MsgSnap, 1, 2, 1)
	snap.Snapshot = &pb.Snapshot{Data: []byte("checkpoint-id"), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(10), Term: proto.Uint64(2)}}
	t1.Send([]*pb.Message{snap})
	waitFor(t, "snapshot delivered and reported", func() bool {
		return rec2.count(1) == 1 && rec1.hasSnap(snapReport{2, false})
	})
	t1.Send([]*pb.Message{msg(pb.MsgSnap, 1, 9, 1)}) // unknown peer
	waitFor(t, "failed snapshot report", func() bool { return rec1.hasSnap(snapReport{9, true}) })
}

func TestTCPStepErrorsKeepTheConnection(t *testing.T) {
	checkNoLeak(t)
	var logs logBuffer
	rec := newRecorder()
	rec.stepErr = func(m *pb.Message) error {
		if m.GetIndex()%2 == 1 {
			return errors.New("replica says no")
		}
		return nil
	}
	t2 := newTCP(t, fastConfig(7, 2, nil), rec, newLogger(&logs))
	t1 := newTCP(t, fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), newRecorder(), nil)
	for i := range 100 {
		t1.Send([]*pb.Message{app(1, 2, uint64(i+1))})
	}
	waitFor(t, "all stepped", func() bool { return rec.count(1) == 100 })
	checkSequence(t, "1 → 2", rec.from(1), 100)
	if !logs.contains("level=DEBUG msg=\"step failed\"") || !logs.contains("replica says no") {
		t.Errorf("step error not logged at debug:\n%s", logs.buf.String())
	}
	if s := t1.Stats().Peers[2]; s.Dials != 1 {
		t.Errorf("connection was replaced (%d dials)", s.Dials)
	}
}

func TestTCPCloseUnblocksStep(t *testing.T) {
	checkNoLeak(t)
	rec := newRecorder()
	rec.block = make(chan struct{}) // never released: Step waits for ctx
	t2, err := NewTCP(fastConfig(7, 2, nil), rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	t2.Start()
	t1 := newTCP(t, fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), newRecorder(), nil)
	t1.Send([]*pb.Message{app(1, 2, 1)})
	waitFor(t, "inbound connection", func() bool { return t2.Stats().Inbound == 1 })
	if err := t2.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewTCPValidatesConfig(t *testing.T) {
	_, err := NewTCP(Config{Peers: map[uint64]string{0: "x:1", 5: ""}}, newRecorder(), nil)
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"LocalID", "ListenAddr", "peer ID 0", "peer 5 has an empty address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := NewTCP(Config{LocalID: 1, ListenAddr: "127.0.0.1:0", Peers: map[uint64]string{1: "x:1"}}, newRecorder(), nil); err == nil {
		t.Error("local ID among peers accepted")
	}
	if _, err := NewTCP(fastConfig(1, 1, nil), nil, nil); err == nil {
		t.Error("nil handler accepted")
	}
}

// peerTransport is what the node wires: both transports must satisfy it.
type peerTransport interface {
	Send(msgs []*pb.Message)
	AddPeer(id uint64, addr string)
	RemovePeer(id uint64)
	Close() error
}

var (
	_ peerTransport = (*TCP)(nil)
	_ peerTransport = (*MemTransport)(nil)
)

// Raft hands the same *Entry to the MsgApps of every follower; writers of
// different peers marshal them concurrently (run with -race).
func TestTCPSharedEntriesAcrossPeers(t *testing.T) {
	checkNoLeak(t)
	trs, recs := cluster(t, 3, 7)
	for i := range 200 {
		e := []*pb.Entry{{Index: proto.Uint64(uint64(i + 1)), Term: proto.Uint64(1), Data: make([]byte, 100)}}
		a, b := app(1, 2, uint64(i+1)), app(1, 3, uint64(i+1))
		a.Entries, b.Entries = e, e
		trs[0].Send([]*pb.Message{a, b})
	}
	for _, r := range recs[1:] {
		waitFor(t, "delivery", func() bool { return r.count(1) == 200 })
		checkSequence(t, "1 → follower", r.from(1), 200)
	}
}

// TestTCPNotMemberRefusal: an acceptor whose NotMember refuses a sender
// answers with its applied index, which reaches the sender's OnNotMember;
// the refused sender delivers nothing, and a sender NotMember accepts is
// unaffected.
func TestTCPNotMemberRefusal(t *testing.T) {
	checkNoLeak(t)
	var log2 logBuffer
	rec1, rec2, rec3 := newRecorder(), newRecorder(), newRecorder()
	cfg2 := fastConfig(7, 2, nil)
	cfg2.NotMember = func(from uint64, _ bool) (uint64, bool) { return 4242, from == 1 }
	t2 := newTCP(t, cfg2, rec2, newLogger(&log2))

	type report struct{ peer, applied uint64 }
	reports := make(chan report, 16)
	cfg1 := fastConfig(7, 1, map[uint64]string{2: t2.Addr()})
	cfg1.OnNotMember = func(peer, applied uint64) {
		select {
		case reports <- report{peer, applied}:
		default:
		}
	}
	t1 := newTCP(t, cfg1, rec1, nil)
	t3 := newTCP(t, fastConfig(7, 3, map[uint64]string{2: t2.Addr()}), rec3, nil)

	t1.Send([]*pb.Message{app(1, 2, 1)})
	select {
	case r := <-reports:
		if r != (report{2, 4242}) {
			t.Fatalf("OnNotMember(%d, %d), want (2, 4242)", r.peer, r.applied)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnNotMember was not called")
	}
	waitFor(t, "the refusal logged at debug", func() bool {
		return log2.contains("level=DEBUG msg=\"refused peer connection\"") && log2.contains("as of applied index 4242")
	})

	// Node 3 is a member: its messages arrive.
	t3.Send([]*pb.Message{app(3, 2, 1)})
	waitFor(t, "node 3's message delivered", func() bool { return rec2.count(3) == 1 })
	if n := rec2.count(1); n != 0 {
		t.Fatalf("refused sender delivered %d messages", n)
	}
}

// TestTCPProbeDialsWithoutMessages: a member with nothing to send (a
// learner, which never campaigns) never dialled anyone, so a leader that
// no longer counts it could never tell it so. Probe dials every peer not
// connected, and a refusal reaches OnNotMember; a connected peer is left
// as it is.
func TestTCPProbeDialsWithoutMessages(t *testing.T) {
	checkNoLeak(t)
	rec1, rec2, rec3 := newRecorder(), newRecorder(), newRecorder()
	cfg2 := fastConfig(7, 2, nil)
	cfg2.NotMember = func(from uint64, _ bool) (uint64, bool) { return 77, from == 1 }
	t2 := newTCP(t, cfg2, rec2, nil)
	t3 := newTCP(t, fastConfig(7, 3, nil), rec3, nil)

	reports := make(chan uint64, 16)
	cfg1 := fastConfig(7, 1, map[uint64]string{2: t2.Addr(), 3: t3.Addr()})
	cfg1.OnNotMember = func(peer, applied uint64) {
		select {
		case reports <- applied:
		default:
		}
	}
	t1 := newTCP(t, cfg1, rec1, nil)
	t1.Probe()
	select {
	case applied := <-reports:
		if applied != 77 {
			t.Fatalf("OnNotMember(_, %d), want 77", applied)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Probe did not dial the peer that refuses this node")
	}
	waitFor(t, "the probe's connection to node 3", func() bool { return t1.Connected(3) })
	if n := rec3.count(1); n != 0 {
		t.Fatalf("a probe delivered %d messages", n)
	}
}

// TestTCPProbeDialEndedByAddressChange: a peer whose address changes while
// its writer is in a probe's dial drops what was queued meanwhile as a
// writer ended any other way does, so a MsgSnap among it is reported
// failed; unreported, raft would hold the member in StateSnapshot for good.
func TestTCPProbeDialEndedByAddressChange(t *testing.T) {
	checkNoLeak(t)
	// Accepts and never answers the handshake: the probe's dial waits.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	rec1 := newRecorder()
	t2 := newTCP(t, fastConfig(7, 2, nil), newRecorder(), nil)
	cfg1 := fastConfig(7, 1, map[uint64]string{2: silent.Addr().String()})
	cfg1.DialTimeout = time.Minute
	t1 := newTCP(t, cfg1, rec1, nil)
	t1.Probe()
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the probe did not dial")
	}
	t1.Send([]*pb.Message{msg(pb.MsgSnap, 1, 2, 1)}) // queued behind the dial
	t1.AddPeer(2, t2.Addr())
	waitFor(t, "the queued snapshot reported failed", func() bool { return rec1.hasSnap(snapReport{2, true}) })
}

// A peer that completes the handshake and drops the connection at once (a
// frame it refuses, or another process with the same node ID taking the
// connection's place) is redialled with a growing backoff: the backoff
// used to end at the first write the kernel took, and the writer
// redialled every 25-50 ms for good, each dial logged at info: some 40
// dials in about 1.5 s.
func TestTCPBackoffSurvivesConnectionsDroppedAtOnce(t *testing.T) {
	checkNoLeak(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(waitTimeout))
				if _, err := readHello(c); err != nil {
					return
				}
				_, _ = c.Write(response{Version: ProtocolVersion, Status: statusOK, ClusterID: 7, ID: 2}.marshal())
			}()
		}
	}()
	cfg := fastConfig(7, 1, map[uint64]string{2: ln.Addr().String()})
	// Doubling from 50 ms to a cap of 400 ms, each wait jittered to at
	// least half: at most about 10 dials in 1.5 s however fast the machine,
	// where a backoff that ends at every accepted write allows 60.
	cfg.MaxBackoff = 400 * time.Millisecond
	tr := newTCP(t, cfg, newRecorder(), nil)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for i := uint64(1); time.Now().Before(deadline); i++ {
		tr.Send([]*pb.Message{app(1, 2, i)})
		time.Sleep(5 * time.Millisecond)
	}
	dials := tr.Stats().Peers[2].Dials
	if dials < 2 {
		t.Fatalf("%d dials: the peer was not redialled at all", dials)
	}
	if dials > 20 {
		t.Fatalf("%d dials in 1.5 s to a peer that drops every connection at once: the backoff did not grow", dials)
	}
}
