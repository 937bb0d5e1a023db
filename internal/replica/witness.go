package replica

import (
	"slices"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/command"
)

// A witness is a voter that must never lead: it holds no data, so a leader
// it became could serve nothing, and a data member it caught up from its
// log would still miss the state behind the log's start. raft has no such
// member; the replica makes one from two rules, each enough alone:
//
//   - a witness never sends a vote request: its own elections (its election
//     timer runs, because raft's vote lease rests on the same ticks) end
//     with its own vote only;
//   - a member never answers a vote request from a witness, and a leader
//     never hands leadership to one.
//
// It ignores MsgTimeoutNow too, the order to campaign that ends a
// leadership transfer, should a leader that does not know it for a witness
// send one. Everything else (appends, heartbeats, votes it grants) is a
// voter's, so it counts in every quorum and refuses its vote to a member
// whose log lacks an entry it holds: that is what keeps a data member
// that missed a committed write from leading (docs/witness.md).

// witnessEntries returns ents as a witness keeps them: a data command's
// payload is dropped, its index and term kept, which is all that raft's
// vote and log-matching rules read; configuration changes and the commands
// that say who the members are and which rules apply keep theirs, because
// the witness applies them. A witness's log therefore could not serve as a
// leader's (the third reason it never leads), and it costs the witness a
// few dozen bytes an entry whatever the values written. An entry whose
// header this kvd does not know keeps its payload, so that the witness
// stops at it as a data member would. ents is not modified: raft still
// holds those entries.
func witnessEntries(ents []*pb.Entry) []*pb.Entry {
	var out []*pb.Entry
	for i, e := range ents {
		keep := e.GetType() != pb.EntryNormal || len(e.GetData()) == 0
		if op, ok := command.PeekOp(e.GetData()); !keep && (!ok || op == command.OpMember || op == command.OpClusterVersion) {
			keep = true
		}
		if keep {
			if out != nil {
				out = append(out, e)
			}
			continue
		}
		if out == nil {
			out = append(make([]*pb.Entry, 0, len(ents)), ents[:i]...)
		}
		out = append(out, &pb.Entry{Term: e.Term, Index: e.Index, Type: e.Type})
	}
	if out == nil {
		return ents
	}
	return out
}

// A witness's election timeout, which is also how long it refuses votes
// after hearing from a leader (raft's vote lease under CheckQuorum), is
// witnessLeaseMargin ticks shorter than the data members'. A data member
// campaigns no sooner than ElectionTicks ticks after its last heartbeat;
// with the same window the witness could still be inside its own and
// ignore the request, and the candidate would try again only after another
// randomized timeout, up to two more election timeouts. No data member can
// stand in for it: in a 2+1 cluster the witness's vote is the only one a
// surviving data member can get. Two ticks cover the tick phases of the two
// processes.
const witnessLeaseMargin = 2

// voteLeaseTicks is this member's raft election timeout, in ticks.
func (c Config) voteLeaseTicks() int {
	if c.Witness {
		return c.witnessVoteLeaseTicks()
	}
	return c.ElectionTicks
}

// witnessVoteLeaseTicks is a witness's election timeout: raft needs it
// longer than the heartbeat.
func (c Config) witnessVoteLeaseTicks() int {
	return max(c.ElectionTicks-witnessLeaseMargin, c.HeartbeatTicks+1)
}

// refreshLease sizes the read lease for the voters now in the
// configuration: shorter while a witness is among them. A lease earned
// under the longer size is dropped.
func (r *Replica) refreshLease() {
	witness := false
	for _, id := range r.confState.GetVoters() {
		witness = witness || r.isWitness(id)
	}
	// The witnesses a leader holds appends back from (witnessgate.go),
	// read from the member table once per configuration change.
	clear(r.witnesses)
	for _, id := range slices.Concat(r.confState.GetVoters(), r.confState.GetLearners()) {
		if r.isWitness(id) {
			if r.witnesses == nil {
				r.witnesses = make(map[uint64]bool)
			}
			r.witnesses[id] = true
		}
	}
	if d := leaseDuration(r.cfg, witness); d != r.lease.dur {
		r.lease.dur, r.lease.until = d, time.Time{}
	}
}

// isWitness reports whether id is a witness, as the node's member table says.
func (r *Replica) isWitness(id uint64) bool {
	return r.cfg.IsWitness != nil && r.cfg.IsWitness(NodeID(id))
}

// refusesWitness reports whether m is one a witness's place in the group
// forbids: an order to campaign sent to a witness, or a witness's request
// for a vote.
func (r *Replica) refusesWitness(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgTimeoutNow:
		if r.cfg.Witness {
			r.logger.Warn("a witness never campaigns: ignoring a leadership transfer to it", "from", m.GetFrom())
			return true
		}
	case pb.MsgVote, pb.MsgPreVote:
		if r.isWitness(m.GetFrom()) {
			r.logger.Warn("ignoring a witness's request for a vote: a witness never leads", "from", m.GetFrom(), "term", m.GetTerm())
			return true
		}
	}
	return false
}

// withoutVoteRequests drops a witness's vote requests from msgs, in place.
func withoutVoteRequests(msgs []*pb.Message) []*pb.Message {
	out := msgs[:0]
	for _, m := range msgs {
		if t := m.GetType(); t != pb.MsgVote && t != pb.MsgPreVote {
			out = append(out, m)
		}
	}
	return out
}
