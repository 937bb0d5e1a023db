package node

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
)

// TestClusterReachesThisVersion: three members of this binary move their
// cluster to its version through the log, every member applies it and
// says so on /v1/version; a joiner whose kvd applies less is refused.
func TestClusterReachesThisVersion(t *testing.T) {
	nodes := startTrio(t)
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.state.ClusterVersion() == command.ClusterVersionMax },
			30*time.Second, 10*time.Millisecond, "cluster version %d on %s", n.state.ClusterVersion(), n.cfg.Name)
		resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/version")
		require.NoError(t, err)
		var v httpapi.VersionInfo
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		resp.Body.Close()
		require.Equal(t, command.ClusterVersionMax, v.ClusterVersion)
		require.Equal(t, command.ClusterVersionMax, v.MaxClusterVersion)
		require.Equal(t, strconv.FormatUint(uint64(n.KV().Status().ID), 16), v.ID, "the member the leader asked")
	}
	var leader *Node
	for _, n := range nodes {
		if n.KV().Status().Role == "leader" {
			leader = n
		}
	}
	require.NotNil(t, leader)
	_, err := leader.members.AddMember(t.Context(), httpapi.MemberInfo{Name: "n9", PeerAddr: "127.0.0.1:9", MaxClusterVersion: 1})
	require.ErrorIs(t, err, kv.ErrVersionTooOld)
	resp, err := http.Post("http://"+leader.HTTPAddr()+"/v1/cluster/members", "application/json",
		strings.NewReader(`{"name":"n9","peer_addr":"127.0.0.1:9","max_cluster_version":1}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusConflict, resp.StatusCode)
}
