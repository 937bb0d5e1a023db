package node

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/testing/syncbuf"
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
		_, err := n1.members.TransferLeader(t.Context(), "n2")
		return err == nil && n2.rep.Status().Role == "leader"
	}, 30*time.Second, 50*time.Millisecond)

	// n3 bootstraps from n1 alone (the founding voters) and must still
	// answer n2, the leader.
	joinReady(t, "n3", n2)
	require.Eventually(t, func() bool { return slices.Contains(n2.rep.Status().Voters, IDOf("n3")) },
		30*time.Second, 10*time.Millisecond)
}

// --join is read only by an empty data dir. One that founded its own
// cluster, restarted with --join, used to go on as that cluster without a
// word; the operator who meant to join another hears why it did not. A
// joined member restarted with its --join still set is the usual case and
// stays quiet.
func TestJoinOnAFoundedDataDirIsReported(t *testing.T) {
	const warning = "join is ignored: this data dir already holds a cluster it founded"
	restart := func(t *testing.T, cfg config.Config) string {
		t.Helper()
		var logs syncbuf.Buffer
		n, err := Start(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		require.NoError(t, err)
		require.NoError(t, n.Shutdown(t.Context()))
		return logs.String()
	}

	dir := t.TempDir()
	n := startReady(t, loneConfig("n1", dir, "127.0.0.1:0"))
	require.NoError(t, n.Shutdown(t.Context()))
	cfg := loneConfig("n1", dir, "127.0.0.1:0")
	cfg.Join = "http://127.0.0.1:1"
	require.Contains(t, restart(t, cfg), warning)

	n1 := startReady(t, loneConfig("n1", t.TempDir(), freeAddr(t)))
	t.Cleanup(func() { _ = n1.Shutdown(t.Context()) })
	n2 := joinReady(t, "n2", n1)
	cfg2 := n2.cfg
	require.NoError(t, n2.Shutdown(t.Context()))
	require.NotContains(t, restart(t, cfg2), warning)
}
