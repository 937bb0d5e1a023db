package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// ConfChangeType is what a configuration change does to one member.
type ConfChangeType int

// Configuration changes kvd makes. A new member always enters as a learner
// and is promoted by the leader once it has caught up, so adding a member
// never makes the cluster wait on a node that has nothing yet.
const (
	AddLearner ConfChangeType = iota + 1
	PromoteVoter
	RemoveMember
)

// ConfChange is a committed configuration change as the state machine sees
// it, with the proposer's context (kvd puts the member's name and address
// there).
type ConfChange struct {
	Type    ConfChangeType
	ID      NodeID
	Context []byte
}

// Errors of membership operations.
var (
	ErrNotLeader     = errors.New("this node is not the leader")
	ErrUnknownMember = errors.New("no such member")
	ErrMemberExists  = errors.New("member already exists")
	ErrQuorumAtRisk  = errors.New("the change would leave the cluster without a quorum of healthy voters")
	// ErrLastVoter: raft has no configuration without a voter (it stops the
	// node applying one, at every restart), so not even a forced removal
	// may propose it.
	ErrLastVoter = errors.New("it is the last voter, which no change can remove")
	// ErrNoTransferTarget: a leadership transfer named no voter, and no
	// other voter has answered this leader lately (a single node, or the
	// others down).
	ErrNoTransferTarget = errors.New("no other voter to transfer to: none has answered the leader lately")
	ErrRemoved          = errors.New("this member was removed from the cluster")
	// ErrWitnessTarget refuses to make a witness leader.
	ErrWitnessTarget = errors.New("it is a witness, which holds no data and never leads")
	// ErrTransferring: raft takes no proposal while leadership is being
	// handed over, which ends within an election timeout. Retry.
	ErrTransferring = errors.New("a leadership transfer is in progress; retry in a moment")
	// ErrChangeInProgress: raft takes one configuration change at a time
	// (a new leader's first change waits until it has applied its log, and
	// a learner's promotion is a change too). Retry once it is applied.
	ErrChangeInProgress = errors.New("another membership change is in progress; retry once it is applied")
)

// Progress is the leader's view of one member's replication.
type Progress struct {
	Match uint64
	// Active: the member answered within the last election timeout, and
	// the connection to it is up (when the transport knows; see Links).
	Active bool
	// Unknown: not active, but this leader has led for less than an
	// election timeout, too short to have heard from every live member:
	// neither healthy nor unhealthy yet.
	Unknown bool
	Learner bool
}

// ErrConfChangeTimeout means the change was not applied in time; it may
// still be (another configuration change may have been in progress).
var ErrConfChangeTimeout = errors.New("configuration change not applied in time; it may still apply")

// do runs f on the Ready loop, which owns the RawNode, and returns its error.
func (r *Replica) do(ctx context.Context, f func() error) error {
	errc := make(chan error, 1)
	select {
	case r.adminc <- func() { errc <- f() }:
	case <-ctx.Done():
		return ErrTimeout
	case <-r.done:
		return ErrStopped
	}
	select {
	case err := <-errc:
		return err
	case <-r.done:
		return ErrStopped
	}
}

// ChangeMember proposes a configuration change and waits until it is
// applied on this node, and returns the index of the change's entry. Only
// the leader accepts one: it alone knows whether the change is safe.
// Removing a voter is refused with ErrQuorumAtRisk when the voters left that
// the leader hears from would be fewer than their quorum, unless force is
// set.
func (r *Replica) ChangeMember(ctx context.Context, reqID uint64, typ ConfChangeType, id NodeID, context []byte, force bool) (uint64, error) {
	ch, ok := r.waits.register(reqID)
	if !ok {
		return 0, fmt.Errorf("change member: duplicate request ID %x", reqID)
	}
	defer r.waits.cancel(reqID)
	err := r.do(ctx, func() error {
		if r.removed {
			return ErrRemoved
		}
		st := r.rn.Status()
		if st.RaftState != raft.StateLeader {
			return ErrNotLeader
		}
		voters, learners := r.confState.GetVoters(), r.confState.GetLearners()
		isVoter, isLearner := slices.Contains(voters, uint64(id)), slices.Contains(learners, uint64(id))
		cc := &pb.ConfChange{Id: new(reqID), NodeId: new(uint64(id)), Context: context}
		switch typ {
		case AddLearner:
			if isVoter || isLearner {
				return ErrMemberExists
			}
			cc.Type = new(pb.ConfChangeAddLearnerNode)
		case PromoteVoter:
			if !isLearner {
				return ErrUnknownMember
			}
			cc.Type = new(pb.ConfChangeAddNode)
		case RemoveMember:
			if !isVoter && !isLearner {
				return ErrUnknownMember
			}
			if isVoter && len(voters) == 1 {
				return ErrLastVoter
			}
			if isVoter && !force {
				if err := removalSafe(st, voters, uint64(id), r.heardFrom); err != nil {
					return err
				}
			}
			cc.Type = new(pb.ConfChangeRemoveNode)
		default:
			return fmt.Errorf("change member: unknown change %d", typ)
		}
		if err := r.rn.ProposeConfChange(cc); err != nil {
			if errors.Is(err, raft.ErrProposalDropped) {
				// A leader drops proposals only while it hands over.
				return ErrTransferring
			}
			return err
		}
		r.waits.markProposed([]proposal{{reqID: reqID}})
		r.confProposed = reqID
		return nil
	})
	if err != nil {
		return 0, err
	}
	var o Outcome
	select {
	case o = <-ch:
	case <-ctx.Done():
		return 0, ErrConfChangeTimeout
	case <-r.done:
		// The loop answered every waiter before it closed done: a change
		// raft took says so (ErrUnknownOutcome), which done alone cannot.
		select {
		case o = <-ch:
		default:
			return 0, ErrStopped
		}
	}
	if o.Err != nil {
		return 0, o.Err
	}
	return o.Index, nil
}

// checkConfProposed answers the configuration change proposed since the
// last Ready with ErrChangeInProgress if raft did not append it. Raft does
// not refuse a change while another is pending: it appends an empty entry
// in its place, silently, and the change's caller would wait out its
// timeout for an entry that never comes. The entries raft appended since
// the proposal are all in this Ready's Entries.
func (r *Replica) checkConfProposed(rd raft.Ready) {
	reqID := r.confProposed
	if reqID == 0 {
		return
	}
	r.confProposed = 0
	for _, e := range rd.Entries {
		if e.GetType() != pb.EntryConfChange {
			continue
		}
		var cc pb.ConfChange
		if proto.Unmarshal(e.GetData(), &cc) == nil && cc.GetId() == reqID {
			return
		}
	}
	r.waits.trigger(reqID, Outcome{Err: ErrChangeInProgress})
}

// removalSafe checks that after removing id the voters the leader hears from
// still form a quorum of the remaining voters.
func removalSafe(st raft.Status, voters []uint64, id uint64, heard func(uint64, tracker.Progress) bool) error {
	left := 0
	healthy := 0
	for _, v := range voters {
		if v == id {
			continue
		}
		left++
		if pr, ok := st.Progress[v]; v == st.ID || (ok && heard(v, pr)) {
			healthy++
		}
	}
	if healthy < left/2+1 {
		return fmt.Errorf("%w: %d of the %d voters left are reachable, %d needed", ErrQuorumAtRisk, healthy, left, left/2+1)
	}
	return nil
}

// TransferLeadership asks the leader to hand leadership to to (0: the most
// caught-up voter) and waits until this node sees a leader other than the
// one it started with, or ctx ends. It returns the new leader. A follower
// refuses with ErrNotLeader.
func (r *Replica) TransferLeadership(ctx context.Context, to NodeID) (NodeID, error) {
	var from NodeID
	err := r.do(ctx, func() error {
		st := r.rn.Status()
		from = NodeID(st.Lead)
		if from == 0 {
			return ErrNoLeader
		}
		// Only the leader transfers. On a follower raft would pass the
		// request on as a MsgTransferLeader whose sender is the transferee,
		// not this node, and the leader's transport drops the connection
		// carrying it as a protocol violation: the transfer never happens.
		// ErrNotLeader makes the HTTP API forward the request to the leader.
		if st.RaftState != raft.StateLeader {
			return ErrNotLeader
		}
		voters := r.confState.GetVoters()
		if to == 0 {
			to = NodeID(bestSuccessor(st, voters, r.heardFrom, r.isWitness))
			if to == 0 {
				return fmt.Errorf("transfer leadership: %w", ErrNoTransferTarget)
			}
		}
		if !slices.Contains(voters, uint64(to)) {
			return fmt.Errorf("transfer leadership to %x: %w (or not a voter)", to, ErrUnknownMember)
		}
		if r.isWitness(uint64(to)) {
			return fmt.Errorf("transfer leadership to %x: %w", to, ErrWitnessTarget)
		}
		if to == from {
			return nil
		}
		r.rn.TransferLeader(uint64(to))
		return nil
	})
	if err != nil {
		return 0, err
	}
	if to == from {
		return to, nil
	}
	tick := time.NewTicker(r.cfg.TickInterval / 4)
	defer tick.Stop()
	for {
		if l := r.Status().Leader; l != 0 && l != from {
			return l, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, fmt.Errorf("transfer leadership to %x: %w", to, ErrTimeout)
		case <-r.done:
			return 0, ErrStopped
		}
	}
}

// bestSuccessor is the voter, other than the leader, with the most of the
// log, among those the leader hears from.
func bestSuccessor(st raft.Status, voters []uint64, heard func(uint64, tracker.Progress) bool, witness func(uint64) bool) uint64 {
	var best uint64
	var bestMatch uint64
	for _, v := range voters {
		pr, ok := st.Progress[v]
		if v == st.ID || !ok || !heard(v, pr) || witness(v) {
			continue
		}
		if best == 0 || pr.Match > bestMatch {
			best, bestMatch = v, pr.Match
		}
	}
	return best
}

// Progress returns the leader's view of every member (nil on a follower),
// as of the last tick.
func (r *Replica) Progress() map[NodeID]Progress {
	p := r.progress.Load()
	if p == nil {
		return nil
	}
	return *p
}

// onTick runs on the Ready loop every tick: it refreshes the published
// progress and promotes learners that have caught up.
func (r *Replica) onTick() {
	r.ticks++
	r.renewLease()
	if r.rn.BasicStatus().RaftState != raft.StateLeader {
		if r.progress.Load() != nil {
			r.progress.Store(nil)
		}
		// What a former leader heard says nothing about a later term: a
		// member re-elected starts from raft's flags alone.
		r.heardAt = nil
		return
	}
	// Status copies every peer's progress: once per tick, not per Ready.
	st := r.rn.Status()
	r.progress.Store(new(r.leaderProgress(st)))
	for id, pr := range st.Progress {
		if pr.IsLearner && caughtUp(pr, st.GetCommit()) && r.ticks >= r.promoteAfter[id] {
			// One attempt per election timeout: raft refuses a second
			// configuration change while one is pending.
			if r.promoteAfter == nil {
				r.promoteAfter = map[uint64]uint64{}
			}
			r.promoteAfter[id] = r.ticks + uint64(r.cfg.ElectionTicks)
			cc := &pb.ConfChange{Type: new(pb.ConfChangeAddNode), NodeId: new(id)}
			if err := r.rn.ProposeConfChange(cc); err != nil {
				r.logger.Warn("promote learner", "id", fmt.Sprintf("%x", id), "err", err)
			} else {
				r.logger.Info("promoting caught-up learner to voter", "id", fmt.Sprintf("%x", id), "match", pr.Match, "commit", st.GetCommit())
			}
		}
	}
}

// leaderProgress records, at this tick of a leader, which members raft
// saw active, and returns the progress it publishes.
func (r *Replica) leaderProgress(st raft.Status) map[NodeID]Progress {
	if r.heardAt == nil {
		r.heardAt = map[uint64]uint64{}
		r.leaderTick = r.ticks
	}
	fresh := r.ticks-r.leaderTick < uint64(r.cfg.ElectionTicks)
	for id := range r.heardAt {
		if _, ok := st.Progress[id]; !ok {
			delete(r.heardAt, id) // removed from the configuration
		}
	}
	out := make(map[NodeID]Progress, len(st.Progress))
	for id, pr := range st.Progress {
		if pr.RecentActive {
			r.heardAt[id] = r.ticks
		}
		active := id == st.ID || r.heardFrom(id, pr)
		out[NodeID(id)] = Progress{Match: pr.Match, Active: active, Unknown: !active && fresh, Learner: pr.IsLearner}
	}
	return out
}

// heardFrom reports whether the leader heard from peer id within about an
// election timeout. raft's RecentActive alone is not that: with CheckQuorum
// the leader clears it for every peer once per election timeout, in the
// same tick that sends the heartbeats that will set it again. Read in that
// gap (the rest of the tick for the published progress, a round trip for
// an admin request, longer if a follower is slow to answer) every follower
// looks silent, so a healthy cluster would show all its followers
// unhealthy and refuse a safe removal. A peer seen active within the last
// ElectionTicks ticks still counts, which is the window CheckQuorum itself
// judges by; a dead peer is reported at most one election timeout later
// than raft's flag alone would.
//
// Where the transport knows its connections (Links), a member counts only
// while connected: otherwise one that died less than an election timeout
// ago, or whose last answers were stepped late, would still count, and a
// removal that leaves it among too few live voters would be let through
// (seen in the membership end-to-end test on a loaded machine).
func (r *Replica) heardFrom(id uint64, pr tracker.Progress) bool {
	if r.links != nil && !r.links.Connected(id) {
		return false
	}
	if pr.RecentActive {
		return true
	}
	at, ok := r.heardAt[id]
	return ok && r.ticks-at <= uint64(r.cfg.ElectionTicks)
}

// caughtUp: the learner is replicating and within a small window of the
// commit index, so making it a voter cannot stall commits while it copies.
func caughtUp(pr tracker.Progress, commit uint64) bool {
	return pr.RecentActive && pr.State == tracker.StateReplicate && pr.Match+100 >= commit
}

// confChangeFromEntry decodes a configuration change entry.
func confChangeFromEntry(e *pb.Entry) (pb.ConfChangeI, error) {
	if e.GetType() == pb.EntryConfChange {
		var c pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &c); err != nil {
			return nil, err
		}
		return &c, nil
	}
	var c pb.ConfChangeV2
	if err := proto.Unmarshal(e.GetData(), &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// linksOf returns tr's connection knowledge, if it has any.
func linksOf(tr Transport) Links {
	if l, ok := tr.(Links); ok {
		return l
	}
	return nil
}
