package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/command"
)

// fakeSM is a state machine that only counts indexes.
type fakeSM struct{ applied, synced uint64 }

func (f *fakeSM) Apply(ents []Entry) ([]command.Result, error) {
	for _, e := range ents {
		f.applied = max(f.applied, e.Index)
	}
	return nil, nil
}
func (f *fakeSM) AppliedIndex() uint64                 { return f.applied }
func (f *fakeSM) Sync() (uint64, error)                { f.synced = f.applied; return f.applied, nil }
func (f *fakeSM) InstallSnapshot([]byte, uint64) error { return errors.New("not used") }

// TestTrackedSMReportsNoMoreThanRaftDelivered: a state installed from a
// snapshot is ahead of the log; the replica must reason (compaction, read
// barriers) in the indexes raft has delivered, or it would compact entries
// its log does not hold.
func TestTrackedSMReportsNoMoreThanRaftDelivered(t *testing.T) {
	inner := &fakeSM{applied: 4004} // state as installed, snapshot index 3800
	sm := newTrackedSM(inner, 3800)
	if got := sm.AppliedIndex(); got != 3800 {
		t.Fatalf("applied %d before redelivery, want 3800", got)
	}
	if _, err := sm.Apply([]Entry{{Index: 3801}, {Index: 3900}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := sm.Sync(); got != 3900 {
		t.Fatalf("synced %d, want 3900 (delivered)", got)
	}
	if _, err := sm.Apply([]Entry{{Index: 4010}}); err != nil {
		t.Fatal(err)
	}
	if got := sm.AppliedIndex(); got != 4010 {
		t.Fatalf("applied %d once raft passed the state, want 4010", got)
	}
}

type fixedSnapLog struct {
	LogStore
	snap *pb.Snapshot
}

func (l fixedSnapLog) Snapshot() (*pb.Snapshot, error) { return l.snap, nil }

func TestSnapshotStorageNeverHandsRaftAnEmptySnapshot(t *testing.T) {
	empty := &snapshotStorage{LogStore: fixedSnapLog{snap: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(0)}}}}
	if _, err := empty.Snapshot(); !errors.Is(err, raft.ErrSnapshotTemporarilyUnavailable) {
		t.Fatalf("empty snapshot: %v", err)
	}
	meta := &pb.SnapshotMetadata{Index: proto.Uint64(10), Term: proto.Uint64(2), ConfState: &pb.ConfState{Voters: []uint64{1}}}
	s := &snapshotStorage{LogStore: fixedSnapLog{snap: &pb.Snapshot{Metadata: meta}}}
	got, err := s.Snapshot()
	if err != nil || got.GetMetadata().GetIndex() != 10 || len(got.GetData()) != 0 {
		t.Fatalf("snapshot %v, %v", got, err)
	}
}

type termLog struct {
	fixedSnapLog
	terms map[uint64]uint64
}

func (l termLog) Term(i uint64) (uint64, error) {
	t, ok := l.terms[i]
	if !ok {
		return 0, raft.ErrUnavailable
	}
	return t, nil
}

// A member added after the last compaction must be in the snapshot it is
// sent, or raft on its side refuses the snapshot: the snapshot describes
// the applied index and the configuration as of it.
func TestSnapshotStorageDescribesTheAppliedIndex(t *testing.T) {
	compaction := &pb.SnapshotMetadata{Index: proto.Uint64(10), Term: proto.Uint64(2), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}
	log := termLog{fixedSnapLog{snap: &pb.Snapshot{Metadata: compaction}}, map[uint64]uint64{10: 2, 25: 3}}
	for _, tc := range []struct {
		name      string
		applied   uint64
		wantIndex uint64
		wantTerm  uint64
		learners  []uint64
	}{
		{"applied past the compaction point", 25, 25, 3, []uint64{4}},
		{"applied at the compaction point", 10, 10, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
			s := &snapshotStorage{LogStore: log, point: func() (uint64, *pb.ConfState) { return tc.applied, cs }}
			got, err := s.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			md := got.GetMetadata()
			if md.GetIndex() != tc.wantIndex || md.GetTerm() != tc.wantTerm {
				t.Fatalf("snapshot at %d term %d, want %d term %d", md.GetIndex(), md.GetTerm(), tc.wantIndex, tc.wantTerm)
			}
			if got := md.GetConfState().GetLearners(); len(got) != len(tc.learners) {
				t.Fatalf("learners %v, want %v", got, tc.learners)
			}
		})
	}
}

// snapSM is echoSM that installs snapshots: the received state is applied
// to the snapshot's index.
type snapSM struct{ echoSM }

func (s *snapSM) InstallSnapshot(_ []byte, index uint64) error {
	s.applied.Store(index)
	return nil
}

// TestProposalCoveredBySnapshotIsAnswered: a follower's proposal whose entry
// the leader sends it as part of a snapshot is never applied here (its
// result is nowhere), so it must be answered when the snapshot is
// installed, not left to wait out the request timeout.
func TestProposalCoveredBySnapshotIsAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var term uint64
	f := startSoloFollowerWith(t, ctx, memLog(t), &term, &snapSM{})
	t.Cleanup(f.stop)
	f.hearLeader()
	const reqID = 7
	p, err := f.r.Propose(ctx, time.Time{}, reqID, binary.BigEndian.AppendUint64(nil, reqID))
	require.NoError(t, err)
	// Forwarded to the leader: raft took it.
	require.Eventually(t, func() bool {
		f.sent.mu.Lock()
		defer f.sent.mu.Unlock()
		for _, m := range f.sent.msgs {
			if m.GetType() == pb.MsgProp {
				return true
			}
		}
		return false
	}, 5*time.Second, time.Millisecond, "the proposal was not forwarded")
	// The leader appended it at 5, committed it and compacted past it: the
	// follower gets a snapshot at 10.
	f.hearLeader(&pb.Message{Type: pb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
			Index: new(uint64(10)), Term: new(term), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}},
		}}})
	require.NoError(t, f.r.do(ctx, func() error { return nil }))
	require.Equal(t, uint64(10), f.r.Status().Applied, "the snapshot was not installed")
	select {
	case o := <-p.ch:
		require.ErrorIs(t, o.Err, ErrUnknownOutcome)
	default:
		t.Fatal("the proposal covered by the snapshot is still waiting")
	}
	require.Zero(t, f.r.Status().Pending)
}
