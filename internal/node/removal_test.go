package node

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/replica"
)

func TestMemberSince(t *testing.T) {
	self := uint64(IDOf("n2"))
	founding := []member{{Name: "n1", ID: uint64(IDOf("n1"))}, {Name: "n2", ID: self}}
	for _, tc := range []struct {
		name  string
		ms    membership
		since uint64
		known bool
	}{
		{"founding member", membership{Members: founding}, 0, true},
		{"data dir started under a name --initial-cluster did not give", membership{Members: founding[:1]}, 0, false},
		{"joined, with the index its join answer gave", membership{Members: founding, Bootstrap: []uint64{1, 2}, AddedAt: 4711}, 4711, true},
		// A rejoined founding member is in the bootstrap voters too: only
		// its join decides.
		{"joined, answered by an older kvd", membership{Members: founding, Bootstrap: []uint64{self}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{cfg: config.Config{Name: "n2"}, ms: &tc.ms}
			since, known := n.memberSince()
			require.Equal(t, tc.known, known)
			require.Equal(t, tc.since, since)
		})
	}
}

func TestRemovedFrom(t *testing.T) {
	st := func(applied, commit uint64, voters, learners []replica.NodeID) replica.Status {
		return replica.Status{ID: 2, Applied: applied, Commit: commit, Voters: voters, Learners: learners}
	}
	for _, tc := range []struct {
		name    string
		since   uint64
		st      replica.Status
		removed bool
	}{
		{"a voter", 0, st(10, 10, []replica.NodeID{1, 2, 3}, nil), false},
		{"a learner", 0, st(10, 10, []replica.NodeID{1, 3}, []replica.NodeID{2}), false},
		{"a founding member left out, caught up", 0, st(10, 10, []replica.NodeID{1, 3}, nil), true},
		{"left out, but behind its commit index (its re-addition may follow)", 0, st(9, 10, []replica.NodeID{1, 3}, nil), false},
		{"nothing known yet", 0, st(0, 0, nil, nil), false},
		{"a joiner replaying history from before its addition", 50, st(40, 40, []replica.NodeID{1, 3}, nil), false},
		{"a joiner left out after its addition", 50, st(60, 60, []replica.NodeID{1, 3}, nil), true},
		{"a joiner at its addition", 50, st(50, 50, []replica.NodeID{1, 3}, []replica.NodeID{2}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.removed, removedFrom(tc.since, tc.st))
		})
	}
}

func TestLeaderShowsRemoval(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		since, applied, leaderApplied uint64
		removed                       bool
	}{
		{"a founding member that was down at its removal", 0, 100, 250, true},
		{"a joiner the leader has not applied yet", 300, 0, 250, false},
		{"a joiner the leader left out after its addition", 200, 210, 250, true},
		{"a leader that knows no more than this member", 0, 250, 250, false},
		{"a leader behind this member", 0, 300, 250, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.removed, leaderShowsRemoval(tc.since, tc.applied, tc.leaderApplied))
		})
	}
}

// TestLeftCluster: a rejoined member catching up replays its old removal,
// and its commit index trails the leader's, so Status.Removed may show
// between that removal and its re-addition; before the point its
// membership started, that is history, not its removal.
func TestLeftCluster(t *testing.T) {
	self := replica.NodeID(IDOf("n2"))
	founding := []member{{Name: "n1", ID: uint64(IDOf("n1"))}, {Name: "n2", ID: uint64(self)}}
	joined := membership{Members: founding, Bootstrap: []uint64{uint64(IDOf("n1")), uint64(self)}, AddedAt: 500}
	others := []replica.NodeID{IDOf("n1")}
	for _, tc := range []struct {
		name string
		ms   membership
		st   replica.Status
		left bool
	}{
		{"a rejoined member replaying its old removal", joined,
			replica.Status{ID: self, Applied: 300, Commit: 300, Voters: others, Removed: true}, false},
		{"a rejoined member removed again", joined,
			replica.Status{ID: self, Applied: 600, Commit: 600, Voters: others, Removed: true}, true},
		{"a joiner of unknown start that applied its removal", membership{Members: founding, Bootstrap: []uint64{uint64(self)}},
			replica.Status{ID: self, Applied: 300, Commit: 300, Voters: others, Removed: true}, true},
		{"a founding member that applied its removal", membership{Members: founding},
			replica.Status{ID: self, Applied: 300, Commit: 300, Voters: others, Removed: true}, true},
		{"a rejoined member at its re-addition", joined,
			replica.Status{ID: self, Applied: 500, Commit: 500, Voters: others, Learners: []replica.NodeID{self}}, false},
		{"a rejoined member that replayed the old incarnation's removal", joined,
			replica.Status{ID: self, Applied: 600, Commit: 600, Voters: append(others, self), RemovedAt: 300}, false},
		{"a founding member removed and added back while it was away", membership{Members: founding},
			replica.Status{ID: self, Applied: 600, Commit: 600, Voters: append(others, self), RemovedAt: 300}, true},
		{"a joined member removed after its addition and added back", joined,
			replica.Status{ID: self, Applied: 900, Commit: 900, Voters: append(others, self), RemovedAt: 700}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{cfg: config.Config{Name: "n2"}, ms: &tc.ms, logger: slog.New(slog.DiscardHandler)}
			require.Equal(t, tc.left, n.leftCluster(tc.st))
		})
	}
}

// leaderOf waits for one of nodes to lead and returns it.
func leaderOf(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var leader *Node
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.rep.Status().Role == "leader" {
				leader = n
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	return leader
}

// others returns nodes without n.
func others(nodes []*Node, n *Node) []*Node {
	var out []*Node
	for _, x := range nodes {
		if x != n {
			out = append(out, x)
		}
	}
	return out
}

// Removing the leader itself: the caller hears that it is done, the
// removed leader stops itself, and the members left elect a leader among
// themselves that takes writes.
func TestRemoveTheLeaderItself(t *testing.T) {
	nodes := startTrio(t)
	leader := leaderOf(t, nodes)
	require.NoError(t, leader.RemoveMember(t.Context(), leader.cfg.Name, false))
	select {
	case <-leader.removed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the removed leader did not stop itself: %+v", leader.rep.Status())
	}
	rest := others(nodes, leader)
	next := leaderOf(t, rest)
	require.Eventually(t, func() bool {
		st := next.rep.Status()
		return len(st.Voters) == 2 && !slices.Contains(st.Voters, IDOf(leader.cfg.Name))
	}, 30*time.Second, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := next.KV().Do(ctx, &command.Command{Op: command.OpSet, Key: []byte("k"), Value: []byte("v")})
	require.NoError(t, err)
}

// In a cluster of two, the member left after the leader removed itself is
// alone in its configuration once it applies the removal: it elects itself.
func TestRemoveTheLeaderOfTwo(t *testing.T) {
	n1 := startReady(t, loneConfig("n1", t.TempDir(), freeAddr(t)))
	t.Cleanup(func() { _ = n1.Shutdown(t.Context()) })
	n2 := joinReady(t, "n2", n1)
	require.Eventually(t, func() bool { return slices.Contains(n1.rep.Status().Voters, IDOf("n2")) },
		30*time.Second, 10*time.Millisecond)
	leader := leaderOf(t, []*Node{n1, n2})
	require.NoError(t, leader.RemoveMember(t.Context(), leader.cfg.Name, false))
	select {
	case <-leader.removed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the removed leader did not stop itself: %+v", leader.rep.Status())
	}
	// As Run does once removed.
	require.NoError(t, leader.Shutdown(t.Context()))
	rest := others([]*Node{n1, n2}, leader)[0]
	require.Eventually(t, func() bool {
		st := rest.rep.Status()
		return st.Role == "leader" && len(st.Voters) == 1
	}, 30*time.Second, 10*time.Millisecond, "%+v", func() any { return rest.rep.Status() })
}

// A member removed while it was down, and its name added back (for a new
// member that would join with an empty data dir), used to start again on
// its old data dir, replay its removal and the re-addition, and serve as
// the new member: two data dirs under one raft ID once the new one joins.
// It now stops as removed.
func TestRemovedMemberAddedBackStopsOnItsOldDataDir(t *testing.T) {
	nodes := startTrio(t)
	n3 := nodes[2]
	if n3.rep.Status().Role == "leader" {
		require.Eventually(t, func() bool {
			_, err := n3.TransferLeader(t.Context(), "n1")
			return err == nil && n3.rep.Status().Role != "leader"
		}, 30*time.Second, 50*time.Millisecond)
	}
	cfg3 := n3.cfg
	require.NoError(t, n3.Shutdown(t.Context()))
	leader := leaderOf(t, nodes[:2])
	require.NoError(t, leader.RemoveMember(t.Context(), "n3", true))
	_, err := leader.AddMember(t.Context(), httpapi.MemberInfo{Name: "n3", PeerAddr: cfg3.PeerAddr})
	require.NoError(t, err)

	n3, err = Start(cfg3, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = n3.Shutdown(context.Background()) })
	select {
	case <-n3.removed:
	case <-time.After(30 * time.Second):
		t.Fatalf("n3 did not stop as removed: %+v", n3.rep.Status())
	}
	require.NotZero(t, n3.rep.Status().RemovedAt)
}

// A lone node has no voter to hand leadership to: the error says so by
// kind (the HTTP API answers it 409 no_transfer_target).
func TestTransferOnALoneNodeHasNoTarget(t *testing.T) {
	n := startReady(t, loneConfig("n1", t.TempDir(), "127.0.0.1:0"))
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	_, err := n.TransferLeader(t.Context(), "")
	require.ErrorIs(t, err, replica.ErrNoTransferTarget)
}
