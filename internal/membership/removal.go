package membership

import (
	"context"
	"log/slog"
	"slices"

	"github.com/kvd-project/kvd/internal/replica"
)

// How a member learns that it was removed from the cluster.
//
// A member that is up when its removal commits applies it and stops
// (replica Status.Removed). Two others would wait forever, not ready: one
// started again after it stopped, whose state store already holds the
// removal (it replays only what follows), and one that was down when it
// was removed, whose log ends before the removal and which no member sends
// anything any more. Both are told apart from a joiner still catching up by
// the point their membership started: 0 for a founding member, and for a
// member that joined later an index at or after its addition (its join
// answer's added_at, kept in cluster.json). A member whose name was
// removed and added again has the same raft ID, so "not in a
// configuration" means removed only for a configuration applied at or
// after that point: before it, the member is a joiner replaying history.
//
//   - Restarted after its removal: leftCluster finds it absent from the
//     configuration it applied itself.
//   - Down when removed: the leader (with peer TLS, any member) refuses its
//     connection as a non-member and says as of which applied index
//     (transport Config.NotMember); if that index is at or after the point
//     its membership started and after what this member has applied, the
//     refusing member knows of its removal.
//
// A member whose starting point is unknown (a join answered by an older
// kvd) draws no conclusion and waits, not ready, as before. A data dir
// started under another name no longer gets this far: Load refuses it
// (File.checkSelf).

// memberSince returns the index from which this node's membership is known
// to hold, and false when it is not known.
func (c *Controller) memberSince() (uint64, bool) {
	self := uint64(IDOf(c.cfg.Name))
	if len(c.file.Bootstrap) == 0 {
		// A founding member, if --initial-cluster named it.
		return 0, slices.ContainsFunc(c.file.Members, func(m FileMember) bool { return m.ID == self })
	}
	return c.file.AddedAt, c.file.AddedAt > 0
}

// removedFrom reports whether st shows a member whose membership started at
// since removed: caught up with what it knows to be committed, and absent
// from a configuration applied at or after since.
func removedFrom(since uint64, st replica.Status) bool {
	if len(st.Voters) == 0 || st.Applied < since || st.Applied < st.Commit {
		return false
	}
	return !slices.Contains(st.Voters, st.ID) && !slices.Contains(st.Learners, st.ID)
}

// leftCluster reports whether st shows this member removed: it applied its
// own removal (Status.Removed), or a configuration that leaves it out.
// Before the point its membership started, either is history: a rejoined
// member catching up replays its old removal, and its commit index trails
// the leader's, so applied can reach commit between that removal and its
// re-addition.
//
// A removal at or after that point is this member's own, even when a later
// entry added its name back: the name was added back for a new member with
// an empty data dir (kvd serve --join), and this data dir, its vote and log
// those of the member removed, must not serve beside it under the same
// raft ID. etcd refuses a removed member's data dir likewise.
func (c *Controller) leftCluster(st replica.Status) bool {
	since, known := c.memberSince()
	if st.Removed && (!known || st.Applied >= since) {
		return true
	}
	if known && st.RemovedAt != 0 && st.RemovedAt >= since {
		c.logger.Error("this member was removed from the cluster and its name added back since: this data dir belongs to the member removed",
			"removed_at", st.RemovedAt, "member_since", since)
		return true
	}
	if known && removedFrom(since, st) {
		c.logger.Error("this member was removed from the cluster: the configuration it has applied leaves it out", "applied", st.Applied, "member_since", since)
		return true
	}
	return false
}

// leaderShowsRemoval reports whether a leader that leaves this member out
// of the configuration it applied at leaderApplied shows its removal: the
// configuration is at or after the member's start (since) and newer than
// what the member itself has applied.
func leaderShowsRemoval(since, applied, leaderApplied uint64) bool {
	return leaderApplied >= since && leaderApplied > applied
}

// notMember implements transport Config.NotMember. The leader refuses
// every sender its applied configuration leaves out. A follower may be
// behind the configuration the sender belongs to (the sender may even be
// its new leader), so it lets through a sender that something vouches
// for (a certificate marked as that member's, or no peer TLS at all), and
// refuses only the others: a certificate the peer CA signed for a client,
// or for anything but a member, must not speak raft to any node, where a
// forged higher-term heartbeat deposes a leader and a forged append or
// snapshot rewrites a follower.
func (c *Controller) notMember(from uint64, vouched bool) (uint64, bool) {
	st := c.rep.Status()
	leader := st.Role == "leader" && st.Applied > 0
	if !leader && vouched {
		return 0, false
	}
	id := replica.NodeID(from)
	if slices.Contains(st.Voters, id) || slices.Contains(st.Learners, id) {
		return 0, false
	}
	if (len(st.Voters) == 0 || c.catchingUp(st)) && c.knownFromFile(from) {
		// A joiner still replaying history before its own addition (its
		// configuration is the bootstrap one): the members its join
		// answer named, a leader added after the founding among them,
		// are who it will hear from.
		return 0, false
	}
	return st.Applied, true
}

// knownFromFile reports whether cluster.json names id, as a member or a
// bootstrap voter.
func (c *Controller) knownFromFile(id uint64) bool {
	return slices.Contains(c.file.Bootstrap, id) ||
		slices.ContainsFunc(c.file.Members, func(m FileMember) bool { return m.ID == id })
}

// onNotMember implements transport Config.OnNotMember: peer (the leader,
// or with peer TLS any member, see notMember) refused this node as a
// non-member as of its applied index. Whichever refused, the configuration
// it applied at that index leaves this node out, which is what the
// conclusion rests on.
func (c *Controller) onNotMember(peer, applied uint64) {
	since, ok := c.memberSince()
	st := c.rep.Status()
	if !ok || !leaderShowsRemoval(since, st.Applied, applied) {
		// A joiner the refusing member has not applied yet, or one that
		// knows no more than we do: nothing to conclude.
		// Once at info: the member redials after every backoff step.
		level := slog.LevelDebug
		if !c.notMemberLogged.Swap(true) {
			level = slog.LevelInfo
		}
		c.logger.Log(context.Background(), level, "a member does not count this node as a member yet", "peer", peer, "its_applied", applied, "applied", st.Applied, "member_since", since, "known", ok)
		return
	}
	c.logger.Error("a member refused this member's connection: it was removed from the cluster while it was away",
		"peer", peer, "its_applied", applied, "applied", st.Applied, "member_since", since)
	c.markRemoved()
}

func (c *Controller) markRemoved() {
	c.removedOnce.Do(func() { close(c.removed) })
}
