package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

func role(t *testing.T, p *kvdproc.Proc) string {
	t.Helper()
	return dial(t, p.MemcacheAddr).stat("raft_role")
}

func leaderOf(t *testing.T, procs []*kvdproc.Proc) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for i, p := range procs {
			if p != nil && role(t, p) == "leader" {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no leader within 15s")
	return -1
}

// setUntilOK retries a set on addr until it is acknowledged (bounded) and
// returns how long that took.
func setUntilOK(t *testing.T, addr, key, val string, within time.Duration) time.Duration {
	t.Helper()
	c := mcClient(addr)
	c.Timeout = 3 * time.Second
	start := time.Now()
	for {
		err := c.Set(&memcache.Item{Key: key, Value: []byte(val)})
		if err == nil {
			return time.Since(start)
		}
		require.Less(t, time.Since(start), within, "no write acknowledged within %s: %v", within, err)
		time.Sleep(20 * time.Millisecond)
	}
}

func TestThreeNodeClusterSurvivesLeaderKill(t *testing.T) {
	procs := kvdproc.StartCluster(t, 3)

	// Write on each node, read the write on every node: a read anywhere
	// after an acknowledged write sees it (followers read via ReadIndex).
	for i, p := range procs {
		key := fmt.Sprintf("from-n%d", i+1)
		setUntilOK(t, p.MemcacheAddr, key, "v", 10*time.Second)
		for j, q := range procs {
			it, err := mcClient(q.MemcacheAddr).Get(key)
			require.NoError(t, err, "read %s on n%d", key, j+1)
			require.Equal(t, "v", string(it.Value))
		}
	}

	// Kill the leader; the survivors elect a new one and take writes.
	lead := leaderOf(t, procs)
	old := procs[lead]
	old.Kill()
	procs[lead] = nil
	var survivor *kvdproc.Proc
	for _, p := range procs {
		if p != nil {
			survivor = p
			break
		}
	}
	gap := setUntilOK(t, survivor.MemcacheAddr, "after-kill", "v", 15*time.Second)
	t.Logf("first write acknowledged %s after the leader was killed", gap)
	for i := range 50 {
		setUntilOK(t, survivor.MemcacheAddr, fmt.Sprintf("k%d", i), fmt.Sprint(i), 5*time.Second)
	}

	// The old leader comes back from its data dir and catches up.
	procs[lead] = old.Restart()
	c := mcClient(procs[lead].MemcacheAddr)
	items, err := c.GetMulti([]string{"after-kill", "k0", "k49"})
	require.NoError(t, err)
	require.Len(t, items, 3)

	// Every replica holds the same data.
	for _, p := range procs {
		got := map[string]string{}
		keys := []string{"from-n1", "from-n2", "from-n3", "after-kill"}
		for i := range 50 {
			keys = append(keys, fmt.Sprintf("k%d", i))
		}
		items, err := mcClient(p.MemcacheAddr).GetMulti(keys)
		require.NoError(t, err)
		for k, it := range items {
			got[k] = string(it.Value)
		}
		require.Len(t, got, len(keys), "node %s", p.Name)
	}
}

func TestTwoNodeClusterFailsClearlyWithOneDown(t *testing.T) {
	procs := kvdproc.StartCluster(t, 2, "--request-timeout", "2s")
	setUntilOK(t, procs[0].MemcacheAddr, "a", "1", 10*time.Second)
	procs[1].Kill()

	// A hang would fail on the connection's deadline (dial sets one); the
	// answers must be SERVER_ERROR lines, not silence.
	rc := dial(t, procs[0].MemcacheAddr)
	rc.send("set b 0 0 1\r\n2\r\n")
	l := rc.line()
	require.True(t, strings.HasPrefix(l, "SERVER_ERROR "), "write with no quorum: %q", l)
	rc.send("get a\r\n")
	l = rc.line()
	require.True(t, strings.HasPrefix(l, "SERVER_ERROR "), "linearizable read with no quorum: %q", l)
}
