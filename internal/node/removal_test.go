package node

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/replica"
)

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
	require.NoError(t, leader.members.RemoveMember(t.Context(), leader.cfg.Name, false))
	select {
	case <-leader.members.Removed():
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
	require.NoError(t, leader.members.RemoveMember(t.Context(), leader.cfg.Name, false))
	select {
	case <-leader.members.Removed():
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
			_, err := n3.members.TransferLeader(t.Context(), "n1")
			return err == nil && n3.rep.Status().Role != "leader"
		}, 30*time.Second, 50*time.Millisecond)
	}
	cfg3 := n3.cfg
	require.NoError(t, n3.Shutdown(t.Context()))
	leader := leaderOf(t, nodes[:2])
	require.NoError(t, leader.members.RemoveMember(t.Context(), "n3", true))
	_, err := leader.members.AddMember(t.Context(), httpapi.MemberInfo{Name: "n3", PeerAddr: cfg3.PeerAddr})
	require.NoError(t, err)

	n3, err = Start(cfg3, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = n3.Shutdown(context.Background()) })
	select {
	case <-n3.members.Removed():
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
	_, err := n.members.TransferLeader(t.Context(), "")
	require.ErrorIs(t, err, replica.ErrNoTransferTarget)
}
