package transport

import (
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// memCluster registers nodes 1..n on a fresh network.
func memCluster(t *testing.T, n int) (*MemNetwork, []*MemTransport, []*recorder) {
	t.Helper()
	net := NewMemNetwork()
	t.Cleanup(net.Close)
	trs := make([]*MemTransport, n)
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = newRecorder()
		trs[i] = net.Transport(uint64(i+1), recs[i])
	}
	return net, trs, recs
}

// marker sends a message with index idx on each given link and waits for
// it. Links are FIFO, so once the marker arrives every message sent before
// it on that link has either arrived or been dropped.
func marker(t *testing.T, trs []*MemTransport, recs []*recorder, idx uint64, links ...[2]uint64) {
	t.Helper()
	for _, l := range links {
		trs[l[0]-1].Send([]*pb.Message{app(l[0], l[1], idx)})
	}
	for _, l := range links {
		waitFor(t, "marker", func() bool {
			got := recs[l[1]-1].from(l[0])
			return len(got) > 0 && got[len(got)-1] == idx
		})
	}
}

func TestMemDeliversInOrder(t *testing.T) {
	checkNoLeak(t)
	const n = 2000
	_, trs, recs := memCluster(t, 3)
	for i := range n {
		for from, tr := range trs {
			var batch []*pb.Message
			for to := range trs {
				if to != from {
					batch = append(batch, app(uint64(from+1), uint64(to+1), uint64(i+1)))
				}
			}
			tr.Send(batch)
		}
	}
	for to, rec := range recs {
		for from := range trs {
			if from != to {
				waitFor(t, "delivery", func() bool { return rec.count(uint64(from+1)) == n })
				checkSequence(t, "mem", rec.from(uint64(from+1)), n)
			}
		}
	}
}

func TestMemPartitionAndHeal(t *testing.T) {
	checkNoLeak(t)
	net, trs, recs := memCluster(t, 3)
	net.Partition([]uint64{1, 2}, []uint64{3})
	trs[0].Send([]*pb.Message{app(1, 2, 1), app(1, 3, 1)})
	trs[2].Send([]*pb.Message{app(3, 1, 1)})
	waitFor(t, "unreachable reports across the partition", func() bool {
		return recs[0].unreachableCount(3) > 0 && recs[2].unreachableCount(1) > 0
	})
	marker(t, trs, recs, 100, [2]uint64{1, 2})
	net.Heal()
	marker(t, trs, recs, 2, [2]uint64{1, 3}, [2]uint64{3, 1})
	if got := recs[2].from(1); len(got) != 1 || got[0] != 2 {
		t.Errorf("3 got %v from 1, want only the marker after heal", got)
	}
	if got := recs[0].from(3); len(got) != 1 || got[0] != 2 {
		t.Errorf("1 got %v from 3, want only the marker after heal", got)
	}
	if got := recs[1].from(1); len(got) != 2 || got[0] != 1 {
		t.Errorf("2 got %v from 1, want the message inside the group and the marker", got)
	}
}

func TestMemPartitionIsolatesUnnamedNodes(t *testing.T) {
	checkNoLeak(t)
	net, trs, recs := memCluster(t, 3)
	net.Partition([]uint64{1, 2})
	trs[2].Send([]*pb.Message{app(3, 1, 1)})
	waitFor(t, "unreachable report", func() bool { return recs[2].unreachableCount(1) > 0 })
	net.Heal()
	marker(t, trs, recs, 2, [2]uint64{3, 1})
	if got := recs[0].from(3); len(got) != 1 {
		t.Errorf("1 got %v from the isolated node", got)
	}
}

func TestMemCutIsOneWay(t *testing.T) {
	checkNoLeak(t)
	net, trs, recs := memCluster(t, 2)
	net.Cut(1, 2)
	trs[0].Send([]*pb.Message{app(1, 2, 1)})
	marker(t, trs, recs, 1, [2]uint64{2, 1}) // the other way works
	waitFor(t, "unreachable report", func() bool { return recs[0].unreachableCount(2) > 0 })
	net.Heal()
	marker(t, trs, recs, 2, [2]uint64{1, 2})
	if got := recs[1].from(1); len(got) != 1 {
		t.Errorf("2 got %v from 1 across the cut", got)
	}
}

func TestMemMessagesInFlightAreDroppedByALaterCut(t *testing.T) {
	checkNoLeak(t)
	net, trs, recs := memCluster(t, 2)
	recs[1].mu.Lock()
	recs[1].block = make(chan struct{})
	release := recs[1].block
	recs[1].mu.Unlock()
	trs[0].Send([]*pb.Message{app(1, 2, 1), app(1, 2, 2), app(1, 2, 3)})
	// Message 1 is being stepped (blocked); 2 and 3 are queued.
	net.Cut(1, 2)
	close(release)
	waitFor(t, "queued messages reported undeliverable", func() bool { return recs[0].unreachableCount(2) > 0 })
	net.Heal()
	marker(t, trs, recs, 4, [2]uint64{1, 2})
	got := recs[1].from(1)
	if got[len(got)-1] != 4 || len(got) > 2 {
		t.Errorf("2 got %v: messages queued before the cut were delivered", got)
	}
}

func TestMemRandomDropIsSeeded(t *testing.T) {
	checkNoLeak(t)
	const n = 1000
	run := func(p float64, seed int64) []uint64 {
		net, trs, recs := memCluster(t, 2)
		defer net.Close()
		net.SetDrop(p, seed)
		for i := range n {
			trs[0].Send([]*pb.Message{app(1, 2, uint64(i+1))})
		}
		net.SetDrop(0, 0)
		marker(t, trs, recs, n+1, [2]uint64{1, 2})
		got := recs[1].from(1)
		return got[:len(got)-1]
	}
	if got := run(1, 1); len(got) != 0 {
		t.Errorf("p=1 delivered %d messages", len(got))
	}
	if got := run(0, 1); len(got) != n {
		t.Errorf("p=0 delivered %d of %d", len(got), n)
	}
	a, b := run(0.5, 42), run(0.5, 42)
	if len(a) < n/4 || len(a) > 3*n/4 {
		t.Errorf("p=0.5 delivered %d of %d", len(a), n)
	}
	if len(a) != len(b) {
		t.Fatalf("same seed, different losses: %d vs %d delivered", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different losses at %d", i)
		}
		if i > 0 && a[i] <= a[i-1] {
			t.Fatalf("reordered: %v", a)
		}
	}
}

func TestMemDelay(t *testing.T) {
	checkNoLeak(t)
	const delay = 20 * time.Millisecond
	const n = 20
	net, trs, recs := memCluster(t, 2)
	net.SetDelay(delay)
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		trs[0].Send([]*pb.Message{app(1, 2, uint64(i+1))})
	}
	waitFor(t, "delayed delivery", func() bool { return recs[1].count(1) == n })
	checkSequence(t, "delayed", recs[1].from(1), n)
	recs[1].mu.Lock()
	at := recs[1].at[1]
	recs[1].mu.Unlock()
	for i := range n {
		// A lower bound only: delivering early would be the bug.
		if d := at[i].Sub(sent[i]); d < delay {
			t.Fatalf("message %d delivered after %v, before the %v delay", i+1, d, delay)
		}
	}
	net.SetDelay(0)
	marker(t, trs, recs, n+1, [2]uint64{1, 2})
}

func TestMemQueueFullReportsUnreachable(t *testing.T) {
	checkNoLeak(t)
	net := NewMemNetwork()
	t.Cleanup(net.Close)
	net.SetQueueSize(2)
	rec1, rec2 := newRecorder(), newRecorder()
	rec2.block = make(chan struct{}) // never released: Close unblocks Step
	t1 := net.Transport(1, rec1)
	net.Transport(2, rec2)
	for i := range 10 {
		t1.Send([]*pb.Message{app(1, 2, uint64(i+1))})
	}
	waitFor(t, "unreachable and failed snapshot", func() bool {
		// Until the link goroutine has taken its first message the queue
		// may have room; keep sending until one is dropped.
		t1.Send([]*pb.Message{msg(pb.MsgSnap, 1, 2, 11)})
		return rec1.unreachableCount(2) > 0 && rec1.hasSnap(snapReport{2, true})
	})
}

func TestMemRestartAndSnapshotReports(t *testing.T) {
	checkNoLeak(t)
	net, trs, recs := memCluster(t, 2)
	trs[0].Send([]*pb.Message{msg(pb.MsgSnap, 1, 2, 1)})
	waitFor(t, "snapshot delivered", func() bool { return recs[0].hasSnap(snapReport{2, false}) })

	trs[1].Close()
	trs[0].Send([]*pb.Message{app(1, 2, 2)})
	waitFor(t, "closed node unreachable", func() bool { return recs[0].unreachableCount(2) > 0 })

	rec2b := newRecorder()
	trs[1] = net.Transport(2, rec2b)
	recs[1] = rec2b
	marker(t, trs, recs, 3, [2]uint64{1, 2})
	if got := rec2b.from(1); len(got) != 1 {
		t.Errorf("restarted node got %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering an open ID twice did not panic")
		}
	}()
	net.Transport(2, newRecorder())
}
