package replica

import (
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Forced describes what ForceNewCluster did to a log.
type Forced struct {
	// Removed are the members whose removal it appended, sorted; empty
	// when self was already the only member (nothing was written).
	Removed []NodeID
	// Promoted is set when self was a learner and was made a voter.
	Promoted bool
	// Uncommitted is how many entries the log held past its commit index:
	// entries this member held without knowing them committed, now
	// committed by it alone.
	Uncommitted uint64
	// Index and Term are where the appended changes end: the new commit
	// index, and the term they carry (0, 0 when nothing was written).
	Index, Term uint64
}

// ForceNewCluster rewrites the raft log of a member whose cluster lost its
// quorum so that self is the only voter (kvd serve --force-new-cluster,
// docs/backup.md). It is called before New, on a log that is not empty, and
// writes the way etcd's --force-new-cluster does: it appends, at the
// current term, one configuration change per other member (a removal; a
// promotion first when self is a learner) and commits the whole log. No
// HardState is invented and nothing is rewritten in place, so the log stays
// what raft could have written, and the changes are applied like any
// other: raft's configuration and the member table agree once New's replica
// has applied them, and the removed members' transports are dropped.
//
// Unlike etcd, which drops the entries past its commit index, every entry
// the log holds is kept and committed: an entry acknowledged to a client
// was committed by the old leader, and this member may hold it without
// having learned it committed yet; dropping it would lose an acknowledged
// write to save the outcome of one that was reported unknown. What no
// choice here can bring back are entries the lost majority committed that
// never reached this member.
func ForceNewCluster(log LogStore, self NodeID) (Forced, error) {
	var out Forced
	if log.IsEmpty() {
		return out, errors.New("force new cluster: the raft log is empty: there is no member here to recover")
	}
	hs, cs, err := log.InitialState()
	if err != nil {
		return out, fmt.Errorf("force new cluster: read raft state: %w", err)
	}
	first, err := log.FirstIndex()
	if err != nil {
		return out, fmt.Errorf("force new cluster: %w", err)
	}
	last, err := log.LastIndex()
	if err != nil {
		return out, fmt.Errorf("force new cluster: %w", err)
	}
	voters, learners, err := membersAfter(log, cs, first, last)
	if err != nil {
		return out, err
	}
	isVoter, isLearner := voters[uint64(self)], learners[uint64(self)]
	if !isVoter && !isLearner {
		return out, fmt.Errorf("force new cluster: this member (%x) is not in its cluster's configuration "+
			"(removed, or its addition never reached it): its data is not a member's to recover", uint64(self))
	}
	out.Uncommitted = last - min(hs.GetCommit(), last)
	// Term(last) answers for the compaction point too, when the log holds
	// no entry past it.
	lastTerm, err := log.Term(last)
	if err != nil {
		return out, fmt.Errorf("force new cluster: term of the last index %d: %w", last, err)
	}
	term := max(hs.GetTerm(), lastTerm)
	var changes []*pb.ConfChange
	if isLearner {
		out.Promoted = true
		changes = append(changes, &pb.ConfChange{Type: new(pb.ConfChangeAddNode), NodeId: new(uint64(self))})
	}
	var others []uint64
	for id := range voters {
		others = append(others, id)
	}
	for id := range learners {
		others = append(others, id)
	}
	slices.Sort(others)
	for _, id := range slices.Compact(others) {
		if id == uint64(self) {
			continue
		}
		out.Removed = append(out.Removed, NodeID(id))
		changes = append(changes, &pb.ConfChange{Type: new(pb.ConfChangeRemoveNode), NodeId: new(id)})
	}
	if len(changes) == 0 && out.Uncommitted == 0 {
		return out, nil // alone already, and nothing to commit
	}
	ents := make([]*pb.Entry, 0, len(changes))
	for k, cc := range changes {
		data, err := proto.Marshal(cc)
		if err != nil {
			return out, fmt.Errorf("force new cluster: encode configuration change: %w", err)
		}
		ents = append(ents, &pb.Entry{Type: new(pb.EntryConfChange), Term: new(term), Index: new(last + 1 + uint64(k)), Data: data})
	}
	out.Index, out.Term = last+uint64(len(ents)), term
	st := &pb.HardState{Term: new(term), Vote: new(hs.GetVote()), Commit: new(out.Index)}
	if term != hs.GetTerm() {
		st.Vote = new(uint64(0)) // no vote was cast in a term the HardState never reached
	}
	if err := log.Save(st, ents); err != nil {
		return out, fmt.Errorf("force new cluster: save: %w", err)
	}
	return out, nil
}

// membersAfter returns raft's voters and learners once every entry of the
// log, from first to last, is applied over cs (the configuration at the
// compaction point): what the configuration would be had all of them been
// committed, which ForceNewCluster makes them.
func membersAfter(log LogStore, cs *pb.ConfState, first, last uint64) (voters, learners map[uint64]bool, err error) {
	voters, learners = map[uint64]bool{}, map[uint64]bool{}
	// A joint configuration (kvd proposes none) counts every side.
	for _, id := range slices.Concat(cs.GetVoters(), cs.GetVotersOutgoing()) {
		voters[id] = true
	}
	for _, id := range slices.Concat(cs.GetLearners(), cs.GetLearnersNext()) {
		learners[id] = true
	}
	for lo := first; lo <= last; {
		// A bounded read at a time: the log may hold large values.
		ents, err := log.Entries(lo, last+1, 64<<20)
		if err != nil {
			return nil, nil, fmt.Errorf("force new cluster: read entries from %d: %w", lo, err)
		}
		if len(ents) == 0 {
			return nil, nil, fmt.Errorf("force new cluster: no entry at %d of %d..%d", lo, first, last)
		}
		for _, e := range ents {
			if t := e.GetType(); t != pb.EntryConfChange && t != pb.EntryConfChangeV2 {
				continue
			}
			cci, err := confChangeFromEntry(e)
			if err != nil {
				return nil, nil, fmt.Errorf("force new cluster: decode configuration change at %d: %w", e.GetIndex(), err)
			}
			for _, c := range cci.AsV2().GetChanges() {
				id := c.GetNodeId()
				switch c.GetType() {
				case pb.ConfChangeAddNode:
					voters[id], learners[id] = true, false
				case pb.ConfChangeAddLearnerNode:
					voters[id], learners[id] = false, true
				case pb.ConfChangeRemoveNode:
					voters[id], learners[id] = false, false
				}
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	for id, ok := range voters {
		if !ok {
			delete(voters, id)
		}
	}
	for id, ok := range learners {
		if !ok {
			delete(learners, id)
		}
	}
	return voters, learners, nil
}
