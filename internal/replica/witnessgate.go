package replica

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// A leader holds its appends to a witness until a data follower has the
// entries, for as long as one is healthy. Without the hold the witness,
// whose acknowledgement is cheap (it fsyncs no payloads), routinely holds
// entries the other data member has not received yet; if the leader dies
// then, the witness rightly refuses that data member its vote (its log is
// behind), and with no other candidate the cluster stays unavailable until
// the dead leader returns, the case docs/witness.md describes. With the
// hold, a witness is never ahead of the most up-to-date data follower
// while one answers, so losing the leader leaves a data member that can
// win: the witness loses the leader's "fast" commits, which are exactly
// the ones that would strand the cluster.
//
// A follower counts as healthy while raft replicates to it (StateReplicate),
// its connection is up and the leader heard from it within the election
// timeout (heardFrom). A
// follower that died closes its connection and is probed at once, so
// nothing waits for it; one that stopped answering without closing
// (paused, cut off) holds each append at most two heartbeats (counted in
// ticks, the replica's clock), after which it goes to the witness as
// before, and within an election timeout raft stops counting the follower
// as active.
type witnessGate struct {
	held map[uint64][]heldApp // per witness, in the order raft sent them
}

// heldApp is an append held back from a witness.
type heldApp struct {
	m    *pb.Message
	last uint64 // index of its last entry
	tick uint64 // Replica.ticks when it was held
}

// witnessHoldTicks bounds how long one append waits: two heartbeats.
func (c Config) witnessHoldTicks() uint64 {
	return 2 * uint64(max(c.HeartbeatTicks, 1))
}

// gateFrontier returns how far the most up-to-date healthy data follower
// has acknowledged the log, and false when there is none to wait for (or
// this node does not lead).
func (r *Replica) gateFrontier() (uint64, bool) {
	if len(r.witnesses) == 0 || r.rn.BasicStatus().RaftState != raft.StateLeader {
		return 0, false
	}
	self := r.cfg.ID
	var frontier uint64
	found := false
	r.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		if id == uint64(self) || typ != raft.ProgressTypePeer || r.witnesses[id] {
			return
		}
		// heardFrom, not RecentActive alone: CheckQuorum clears that flag
		// every election timeout, which would open the hold until the
		// follower's next answer.
		if pr.State == tracker.StateReplicate && r.heardFrom(id, pr) {
			frontier, found = max(frontier, pr.Match), true
		}
	})
	return frontier, found
}

// gate returns what of msgs goes out now, holding back appends to
// witnesses that the frontier has not reached.
func (r *Replica) gate(msgs []*pb.Message) []*pb.Message {
	if len(r.witnesses) == 0 {
		return msgs
	}
	frontier, ok := r.gateFrontier()
	out := msgs[:0]
	for _, m := range msgs {
		if m.GetType() != pb.MsgApp || !r.witnesses[m.GetTo()] {
			out = append(out, m)
			continue
		}
		last := m.GetIndex() + uint64(len(m.Entries))
		q := r.wgate.held[m.GetTo()]
		if ok && (len(q) > 0 || last > frontier) {
			if r.wgate.held == nil {
				r.wgate.held = make(map[uint64][]heldApp)
			}
			r.wgate.held[m.GetTo()] = append(q, heldApp{m: m, last: last, tick: r.ticks})
			continue
		}
		out = append(out, m)
	}
	return out
}

// releaseWitnessApps sends the held appends the frontier has reached, or
// that waited witnessHoldTicks, in order; with no healthy data follower (or no
// longer leader) it sends them all, or drops them when this node no
// longer leads (raft resends what a lost message carried).
func (r *Replica) releaseWitnessApps() {
	if len(r.wgate.held) == 0 {
		return
	}
	if r.rn.BasicStatus().RaftState != raft.StateLeader {
		clear(r.wgate.held)
		return
	}
	frontier, ok := r.gateFrontier()
	var out []*pb.Message
	for id, q := range r.wgate.held {
		n := 0
		for n < len(q) && (!ok || q[n].last <= frontier || r.ticks-q[n].tick >= r.cfg.witnessHoldTicks()) {
			out = append(out, q[n].m)
			n++
		}
		if n == len(q) {
			delete(r.wgate.held, id)
		} else if n > 0 {
			r.wgate.held[id] = append(q[:0], q[n:]...)
		}
	}
	if len(out) > 0 {
		r.tr.Send(out)
	}
}
