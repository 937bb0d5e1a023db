package node

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// joinReady starts name as a member joining through via and waits until
// it is ready.
func joinReady(t *testing.T, name string, via *Node) *Node {
	t.Helper()
	cfg := loneConfig(name, t.TempDir(), freeAddr(t))
	cfg.Join = "http://" + via.HTTPAddr()
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Shutdown(t.Context()) })
	require.Eventually(t, func() bool { return n.KV().Status().Ready }, 30*time.Second, 10*time.Millisecond,
		"%s never became ready: %+v", name, func() any { return n.rep.Status() }())
	return n
}

// A joining member starts from the cluster's founding configuration and
// replays its history from the leader. It used to drop from its transport
// every peer that founding configuration leaves out, the current leader
// among them when that leader joined later itself: its answers to the
// leader went nowhere, and it never caught up (never ready).
func TestJoinerReachesALeaderThatJoinedLater(t *testing.T) {
	n1 := startReady(t, loneConfig("n1", t.TempDir(), freeAddr(t)))
	t.Cleanup(func() { _ = n1.Shutdown(t.Context()) })
	n2 := joinReady(t, "n2", n1)
	// n2 is promoted once caught up; then it can lead.
	require.Eventually(t, func() bool { return slices.Contains(n1.rep.Status().Voters, IDOf("n2")) },
		30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		_, err := n1.TransferLeader(t.Context(), "n2")
		return err == nil && n2.rep.Status().Role == "leader"
	}, 30*time.Second, 50*time.Millisecond)

	// n3 bootstraps from n1 alone (the founding voters) and must still
	// answer n2, the leader.
	joinReady(t, "n3", n2)
	require.Eventually(t, func() bool { return slices.Contains(n2.rep.Status().Voters, IDOf("n3")) },
		30*time.Second, 10*time.Millisecond)
}
