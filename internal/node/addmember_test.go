package node

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
)

// startTrio starts three in-process members of one cluster and waits
// until each is ready.
func startTrio(t *testing.T) []*Node {
	t.Helper()
	names := []string{"n1", "n2", "n3"}
	addrs := make([]string, len(names))
	var initial []string
	for i, name := range names {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs[i] = ln.Addr().String()
		require.NoError(t, ln.Close())
		initial = append(initial, name+"="+addrs[i])
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	nodes := make([]*Node, len(names))
	for i, name := range names {
		cfg := config.Default()
		cfg.Name, cfg.DataDir = name, t.TempDir()
		cfg.MemcacheAddr, cfg.HTTPAddr, cfg.PeerAddr = "127.0.0.1:0", "127.0.0.1:0", addrs[i]
		cfg.InitialCluster = strings.Join(initial, ",")
		n, err := Start(cfg, logger)
		require.NoError(t, err)
		nodes[i] = n
		t.Cleanup(func() { _ = n.Shutdown(t.Context()) })
	}
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.KV().Status().Ready }, 30*time.Second, 10*time.Millisecond)
	}
	return nodes
}

// TestAddMemberAnswersForAnExistingMemberOnlyOnTheLeader: a join for a
// member that is already there is answered from the configuration the
// answering node applied. A follower may be behind a removal of that
// member: it would answer "added" for a member that is not, which the
// rejoining node then finds out as its removal (exit status 4). A follower
// passes the request to the leader instead (kv.ErrNotLeader).
func TestAddMemberAnswersForAnExistingMemberOnlyOnTheLeader(t *testing.T) {
	nodes := startTrio(t)
	var follower, leader *Node
	require.Eventually(t, func() bool {
		follower, leader = nil, nil
		for _, n := range nodes {
			switch n.rep.Status().Role {
			case "leader":
				leader = n
			case "follower":
				follower = n
			}
		}
		return leader != nil && follower != nil
	}, 30*time.Second, 10*time.Millisecond)
	// An existing member other than the follower itself, at its address.
	var other *Node
	for _, n := range nodes {
		if n != follower {
			other = n
		}
	}
	m := httpapi.MemberInfo{Name: other.cfg.Name, PeerAddr: other.cfg.PeerAddr}
	_, err := follower.members.AddMember(t.Context(), m)
	require.ErrorIs(t, err, kv.ErrNotLeader)

	info, err := leader.members.AddMember(t.Context(), m)
	require.NoError(t, err)
	require.NotZero(t, info.AddedAt)
}
