package transport

import (
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestMemReportsSnapshotsLostToAClosedNode: a MsgSnap still queued (or
// delayed) on a link when its receiver closes never reaches raft; raft keeps
// the peer in StateSnapshot until ReportSnapshot, so the loss must be
// reported as a failed snapshot (and the peer unreachable), never silent.
func TestMemReportsSnapshotsLostToAClosedNode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(net *MemNetwork, trs []*MemTransport, recs []*recorder)
	}{
		{"delayed", func(net *MemNetwork, trs []*MemTransport, recs []*recorder) {
			net.SetDelay(time.Hour)
		}},
		{"queued behind a blocked step", func(net *MemNetwork, trs []*MemTransport, recs []*recorder) {
			recs[1].mu.Lock()
			recs[1].block = make(chan struct{}) // never closed: Close unblocks Step
			recs[1].mu.Unlock()
			trs[0].Send([]*pb.Message{app(1, 2, 1)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeak(t)
			net, trs, recs := memCluster(t, 2)
			tc.setup(net, trs, recs)
			trs[0].Send([]*pb.Message{msg(pb.MsgSnap, 1, 2, 2)})
			trs[1].Close()
			waitFor(t, "failed snapshot report", func() bool { return recs[0].hasSnap(snapReport{2, true}) })
			if recs[0].hasSnap(snapReport{2, false}) {
				t.Fatal("a snapshot the receiver never stepped was reported sent")
			}
		})
	}
}
