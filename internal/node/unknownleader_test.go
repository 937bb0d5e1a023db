package node

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A founding member restarted after a member joined and took the lead in
// its absence hears from that leader, whom neither its configuration nor
// its member table knows yet: it learns so only by applying the leader's
// entries, and its answers to the leader went nowhere, so it never did
// (never ready, until a snapshot). It now asks the members it knows for
// its leader's address.
func TestRestartedMemberReachesALeaderThatJoinedMeanwhile(t *testing.T) {
	nodes := startTrio(t)
	n1 := nodes[0]
	cfg1 := n1.cfg
	if n1.rep.Status().Role == "leader" {
		require.Eventually(t, func() bool {
			_, err := n1.members.TransferLeader(t.Context(), "n2")
			return err == nil && n1.rep.Status().Role != "leader"
		}, 30*time.Second, 50*time.Millisecond)
	}
	// It asks the members whose HTTP addresses it knows: those it applied
	// from their publications (a member that ran for a few seconds knows
	// them all).
	require.Eventually(t, func() bool {
		for _, n := range nodes[1:] {
			if m, _ := n1.Member(IDOf(n.cfg.Name)); m.HTTPAddr == "" {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, n1.Shutdown(t.Context()))

	var via *Node
	require.Eventually(t, func() bool {
		for _, n := range nodes[1:] {
			if n.rep.Status().Role == "leader" {
				via = n
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	n4 := joinReady(t, "n4", via)
	require.Eventually(t, func() bool { return slices.Contains(via.rep.Status().Voters, IDOf("n4")) },
		30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		_, err := via.members.TransferLeader(t.Context(), "n4")
		return err == nil && n4.rep.Status().Role == "leader"
	}, 30*time.Second, 50*time.Millisecond)

	n1, err := Start(cfg1, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = n1.Shutdown(t.Context()) })
	require.Eventually(t, func() bool { return n1.KV().Status().Ready }, 30*time.Second, 10*time.Millisecond,
		"n1 never became ready: %+v", func() any { return n1.rep.Status() }())
	require.Equal(t, IDOf("n4"), n1.rep.Status().Leader)
}
