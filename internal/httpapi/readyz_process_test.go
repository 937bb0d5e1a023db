package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

type clusterView struct {
	Self    string `json:"self"`
	Leader  string `json:"leader"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
}

func getCluster(t *testing.T, httpAddr string) clusterView {
	t.Helper()
	var v clusterView
	kvdproc.GetJSON(t, httpAddr, "/v1/cluster", &v)
	return v
}

type readyzBody struct {
	Ready   bool   `json:"ready"`
	Applied uint64 `json:"applied"`
	Commit  uint64 `json:"commit"`
}

// TestReadyzWaitsForCatchUp stops a follower of a 3-node cluster, writes
// while it is down, restarts it and polls /readyz from the moment its
// listener is bound: no 200 may come before the node has applied what the
// leader had committed (DESIGN decision 7: a node answers only once it has
// caught up). The writes stay below the leader's 5000-entry compaction
// margin, so the follower catches up from the log, not a snapshot.
func TestReadyzWaitsForCatchUp(t *testing.T) {
	// The cluster is built by hand (not kvdproc.StartCluster) so that the
	// restart can use Launch, which returns before readiness.
	const n = 3
	members := make([]string, n)
	for i := range members {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		members[i] = fmt.Sprintf("n%d=%s", i+1, l.Addr())
		require.NoError(t, l.Close())
	}
	args := func(i int) []string {
		return []string{"--peer-addr", strings.SplitN(members[i], "=", 2)[1], "--initial-cluster", strings.Join(members, ",")}
	}
	dirs := make([]string, n)
	procs := make([]*kvdproc.Proc, n)
	for i := range procs {
		dirs[i] = filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i+1))
		procs[i] = kvdproc.Launch(t, dirs[i], fmt.Sprintf("n%d", i+1), args(i)...)
	}
	for _, p := range procs {
		p.WaitReady()
	}

	// The victim is a follower; the writes go to the leader.
	view := getCluster(t, procs[0].HTTPAddr)
	require.NotEmpty(t, view.Leader)
	victim, leader := -1, -1
	for i, p := range procs {
		if getCluster(t, p.HTTPAddr).Self == view.Leader {
			leader = i
		} else if victim < 0 {
			victim = i
		}
	}
	require.GreaterOrEqual(t, leader, 0)
	procs[victim].Stop()

	const writes = 3000
	nc, err := net.Dial("tcp", procs[leader].MemcacheAddr)
	require.NoError(t, err)
	defer nc.Close()
	r := bufio.NewReader(nc)
	for done := 0; done < writes; done += 100 {
		var b strings.Builder
		for k := range 100 {
			fmt.Fprintf(&b, "set k%d 0 0 10\r\n%010d\r\n", done+k, done+k)
		}
		require.NoError(t, nc.SetDeadline(time.Now().Add(30*time.Second)))
		_, err := nc.Write([]byte(b.String()))
		require.NoError(t, err)
		for range 100 {
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "STORED\r\n", line)
		}
	}
	target := getCluster(t, procs[leader].HTTPAddr).Commit
	t.Logf("leader commit after %d writes with %s down: %d", writes, procs[victim].Name, target)

	q := kvdproc.Launch(t, dirs[victim], procs[victim].Name, args(victim)...)
	start := time.Now()
	client := &http.Client{Timeout: 5 * time.Second}
	notReady := 0
	var firstNotReady *readyzBody
	for {
		require.Less(t, time.Since(start), 60*time.Second, "restarted node not ready within 60s\n%s", q.Log.String())
		resp, err := client.Get("http://" + q.HTTPAddr + "/readyz")
		require.NoError(t, err)
		var body readyzBody
		decErr := json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		require.NoError(t, decErr)
		if resp.StatusCode != http.StatusOK {
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			require.False(t, body.Ready)
			if firstNotReady == nil {
				firstNotReady = &body
			}
			notReady++
			time.Sleep(2 * time.Millisecond)
			continue
		}
		require.True(t, body.Ready)
		t.Logf("ready after %s and %d not-ready answers (first: %+v); /readyz applied %d, commit %d",
			time.Since(start).Round(time.Millisecond), notReady, firstNotReady, body.Applied, body.Commit)
		require.GreaterOrEqual(t, body.Applied, target,
			"/readyz said 200 with applied %d below the leader's commit %d from before the restart", body.Applied, target)
		after := getCluster(t, q.HTTPAddr)
		require.GreaterOrEqual(t, after.Applied, target)
		break
	}
	// Ready means serving: a read on the restarted node sees the last write.
	mc, err := net.Dial("tcp", q.MemcacheAddr)
	require.NoError(t, err)
	defer mc.Close()
	require.NoError(t, mc.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = fmt.Fprintf(mc, "get k%d\r\n", writes-1)
	require.NoError(t, err)
	line, err := bufio.NewReader(mc).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("VALUE k%d 0 10\r\n", writes-1), line)
}
