package replica

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/command"
)

// Snapshots in kvd are split in two. What raft sees is only metadata: the
// raft log's compaction point (index C, its term, the ConfState as of C),
// which raftlog already keeps. The state itself is the state machine's
// current state, at some applied index X ≥ C, which the transport checkpoints
// and streams out of band and hands over as a local reference in
// Snapshot.Data. A follower installs the state first and the log's
// compaction point second; raft then redelivers C+1…, the state machine skips
// what X already holds, and configuration changes in that range are applied
// to raft again, which is right because raft's ConfState is as of C.

// snapshotLog is the raft log's side of installing a snapshot (raftlog.Log).
type snapshotLog interface {
	// ApplySnapshot discards the whole log and makes meta the compaction
	// point; synced.
	ApplySnapshot(meta *pb.SnapshotMetadata) error
}

// snapshotStorage is the raft.Storage raft reads. Its Snapshot describes the
// state as of the applied index, with the configuration as of that index,
// not the log's compaction point: a member added after the last compaction
// is not in the compaction point's ConfState, and raft refuses a snapshot
// that does not name the receiver, so a new member behind a compacted log
// could not join until the next compaction (robustness fault
// replace-follower found it). etcd snapshots at the applied index too. The
// log keeps its entries; only the receiver's log starts at the snapshot.
// Raft must never get an empty snapshot to send (it panics on one).
type snapshotStorage struct {
	LogStore
	// point returns the applied index and the ConfState as of it; set once
	// the replica exists, and called on the Ready loop (raft's goroutine).
	point func() (uint64, *pb.ConfState)
}

func (s *snapshotStorage) Snapshot() (*pb.Snapshot, error) {
	snap, err := s.LogStore.Snapshot()
	if err != nil {
		return nil, err
	}
	if s.point != nil {
		if idx, cs := s.point(); idx > snap.GetMetadata().GetIndex() {
			term, err := s.LogStore.Term(idx)
			if err != nil {
				return nil, fmt.Errorf("snapshot at applied index %d: %w", idx, err)
			}
			return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: &idx, Term: &term, ConfState: cs}}, nil
		}
	}
	if raft.IsEmptySnap(snap) {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	return snap, nil
}

// SnapshotStats counts snapshots this replica installed.
type SnapshotStats struct {
	// Installed counts snapshots installed (state and log); Failures those
	// whose install failed (each stops the node).
	Installed, Failures uint64
	// LastIndex is the raft index of the latest installed snapshot, and
	// LastApplied the state machine's applied index right after it.
	LastIndex, LastApplied uint64
	// LastDuration is how long the latest install took.
	LastDuration time.Duration
}

// SnapshotStats returns the install counters. Safe from any goroutine.
func (r *Replica) SnapshotStats() SnapshotStats {
	t, ok := r.sm.(*trackedSM)
	if !ok {
		return SnapshotStats{}
	}
	return SnapshotStats{
		Installed:    t.installed.Load(),
		Failures:     t.failures.Load(),
		LastIndex:    t.lastIndex.Load(),
		LastApplied:  t.lastApplied.Load(),
		LastDuration: time.Duration(t.lastDuration.Load()),
	}
}

// trackedSM is the state machine as the Ready loop uses it. After a snapshot
// the state machine can be ahead of the raft log (X > C, even past the log's
// last index until raft catches up), so it reports as applied no more than
// the last index raft delivered (or the snapshot index): compaction, read
// barriers and readiness then reason in raft's indexes, and log compaction
// never asks for an index the log does not hold.
type trackedSM struct {
	StateMachine
	delivered atomic.Uint64

	installed, failures, lastIndex, lastApplied, lastDuration atomic.Uint64
}

func newTrackedSM(sm StateMachine, delivered uint64) *trackedSM {
	t := &trackedSM{StateMachine: sm}
	t.delivered.Store(delivered)
	return t
}

func (t *trackedSM) Apply(ents []Entry) ([]command.Result, error) {
	res, err := t.StateMachine.Apply(ents)
	if err == nil && len(ents) > 0 {
		t.delivered.Store(max(t.delivered.Load(), ents[len(ents)-1].Index))
	}
	return res, err
}

func (t *trackedSM) AppliedIndex() uint64 {
	return min(t.StateMachine.AppliedIndex(), t.delivered.Load())
}

func (t *trackedSM) Sync() (uint64, error) {
	idx, err := t.StateMachine.Sync()
	return min(idx, t.delivered.Load()), err
}

// installSnapshot is the persistence of a Ready's snapshot: the state, then
// the log. The order matters for crashes: a state ahead of its log is fine
// (its applied index makes it skip what it holds), while a log compacted
// past its state would not start ("state store is behind its log").
func (r *Replica) installSnapshot(snap *pb.Snapshot) error {
	meta := snap.GetMetadata()
	idx := meta.GetIndex()
	t, ok := r.sm.(*trackedSM)
	if !ok {
		return errors.New("install snapshot: state machine is not tracked by the replica")
	}
	sl, ok := r.log.(snapshotLog)
	if !ok {
		return fmt.Errorf("install snapshot at %d: the raft log cannot apply snapshots", idx)
	}
	start := time.Now()
	if err := t.StateMachine.InstallSnapshot(snap.GetData(), idx); err != nil {
		t.failures.Add(1)
		return fmt.Errorf("install snapshot at %d (term %d) into the state machine: %w", idx, meta.GetTerm(), err)
	}
	applied := t.StateMachine.AppliedIndex()
	if applied < idx {
		t.failures.Add(1)
		return fmt.Errorf("install snapshot at %d: the received state is applied only to %d", idx, applied)
	}
	if err := sl.ApplySnapshot(meta); err != nil {
		t.failures.Add(1)
		return fmt.Errorf("install snapshot at %d into the raft log: %w", idx, err)
	}
	t.delivered.Store(idx)
	r.lastCompact = idx
	r.span.reset()
	r.confState = proto.Clone(pb.EnsureConfState(meta.GetConfState())).(*pb.ConfState)
	r.refreshLease()
	d := time.Since(start)
	t.installed.Add(1)
	t.lastIndex.Store(idx)
	t.lastApplied.Store(applied)
	t.lastDuration.Store(uint64(d))
	r.logger.Info("installed snapshot", "index", idx, "term", meta.GetTerm(), "state_applied", applied,
		"voters", r.confState.GetVoters(), "learners", r.confState.GetLearners(), "duration", d)
	return nil
}
