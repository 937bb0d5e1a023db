package replica

import (
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// readLease lets the leader answer reads from its own commit index, with no
// heartbeat round, while no other node can have become leader.
//
// raft's own ReadOnlyLeaseBased is not used: it answers at once from the
// commit index and trusts CheckQuorum to make a deposed leader step down.
// The robustness harness showed what that costs: an isolated leader served
// stale reads until it noticed, up to two election timeouts, and a leader
// resumed after SIGSTOP answered the reads queued during the pause before its
// ticks (which had stopped with it) could notice anything.
//
// This lease is earned, not assumed. Every ReadIndex round the leader starts
// at time s and sees acknowledged by a quorum proves that a quorum heard from
// it after s. With CheckQuorum on, a follower that heard from its leader
// refuses to vote for anyone else for ElectionTicks of its own ticks, so no
// other leader can exist before s plus that many ticks. The lease ends safely
// short of it, on the monotonic clock, which keeps running while the process
// is paused: a leader resumed after a pause finds its lease expired and goes
// back to ReadIndex rounds. Leadership transfer bypasses the followers' vote
// refusal, so once this leader has started one, it takes no lease again in
// that term. On followers, lease reads are ReadIndex reads (the leader
// answers them with a heartbeat round).
type readLease struct {
	dur      time.Duration // 0: lease reads are off
	term     uint64        // term the lease was earned in
	until    time.Time     // reads after this need a ReadIndex round
	noTerm   uint64        // a leadership transfer began in this term
	lastUse  time.Time     // last read that wanted the lease
	renewAt  time.Time     // send time of the renewal in flight; zero: none
	served   uint64        // reads answered from the lease
	fallback uint64        // lease reads that needed a ReadIndex round
}

// leaseDuration is how long a quorum acknowledgement keeps the lease. A
// follower counts ElectionTicks ticks from the message that reset its
// election timer; one of them may be a tick that fired before the reset and
// waited in the ticker's buffer, and the next may fire right after it, so the
// ElectionTicks-th comes no sooner than ElectionTicks-2 intervals later. A
// tenth of that is left for clock rate differences between the machines.
// A witness among the voters refuses for fewer ticks (witness.go): the
// lease is then counted from its window.
func leaseDuration(cfg Config, witness bool) time.Duration {
	ticks := cfg.ElectionTicks
	if witness {
		ticks = cfg.witnessVoteLeaseTicks()
	}
	if !cfg.LeaseReads || ticks < 3 {
		return 0
	}
	return time.Duration(ticks-2) * cfg.TickInterval * 9 / 10
}

// valid reports whether the lease covers a read arriving now, given the
// leader's state, and if so, the index the read must wait for.
func (l *readLease) valid(now time.Time, st raft.BasicStatus) (uint64, bool) {
	if l.dur == 0 {
		return 0, false
	}
	l.lastUse = now
	ok := st.RaftState == raft.StateLeader && st.LeadTransferee == 0 &&
		st.GetTerm() == l.term && st.GetTerm() != l.noTerm && now.Before(l.until)
	if !ok {
		l.fallback++
		return 0, false
	}
	l.served++
	return st.GetCommit(), true
}

// acknowledged extends the lease from a ReadIndex request a quorum answered.
func (l *readLease) acknowledged(req inflightRead, st raft.BasicStatus) {
	if !req.sentAt.IsZero() && req.sentAt.Equal(l.renewAt) {
		l.renewAt = time.Time{}
	}
	if l.dur == 0 || st.RaftState != raft.StateLeader || req.term != st.GetTerm() || st.GetTerm() == l.noTerm {
		return
	}
	if until := req.sentAt.Add(l.dur); l.term != st.GetTerm() || until.After(l.until) {
		l.term, l.until = st.GetTerm(), until
	}
}

// wantsRenewal says whether the leader should start a renewal round now: the
// lease is in use, more than half of it has run out, and no renewal is
// already on its way (a lost one is retried after a lease duration).
func (l *readLease) wantsRenewal(now time.Time, st raft.BasicStatus) bool {
	if l.dur == 0 || st.RaftState != raft.StateLeader || st.GetTerm() == l.noTerm {
		return false
	}
	if now.Sub(l.lastUse) > 2*l.dur {
		return false
	}
	if !l.renewAt.IsZero() && now.Sub(l.renewAt) < l.dur {
		return false
	}
	return st.GetTerm() != l.term || l.until.Sub(now) < l.dur/2
}

// sawMessages ends the lease for good in this term when the leader sends a
// MsgTimeoutNow: its target campaigns at once and the followers vote for it
// whatever they last heard from this leader.
func (l *readLease) sawMessages(msgs []*pb.Message, term uint64) {
	if l.dur == 0 {
		return
	}
	for i := range msgs {
		if msgs[i].GetType() == pb.MsgTimeoutNow {
			l.noTerm = term
			l.until = time.Time{}
			return
		}
	}
}
