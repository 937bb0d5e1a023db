package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// requireValues reads every key of want through addr and requires its
// value.
func requireValues(t *testing.T, addr string, want map[string]string) {
	t.Helper()
	c := mcClient(addr)
	for k, v := range want {
		it, err := c.Get(k)
		require.NoError(t, err, "%s through %s", k, addr)
		require.Equal(t, v, string(it.Value), k)
	}
}

// TestForceNewClusterRecoversALostQuorum: a 3-member cluster loses two
// members for good; the third, started with --force-new-cluster, leads
// alone and serves every acknowledged write; two fresh members join it and
// the three serve writes; the forced member restarts without the flag as
// any member does. The lost members are never started again.
func TestForceNewClusterRecoversALostQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five kvd processes")
	}
	procs := kvdproc.StartCluster(t, 3)
	lead := leaderOf(t, procs)
	survivor := procs[(lead+1)%3] // a follower: the harder case
	acked := map[string]string{}
	c := mcClient(procs[lead].MemcacheAddr)
	for i := range 200 {
		k, v := fmt.Sprintf("fk-%03d", i), fmt.Sprintf("value %d", i)
		require.NoError(t, c.Set(&memcache.Item{Key: k, Value: []byte(v)}))
		acked[k] = v
	}
	// A linearizable read through the survivor waits until it has applied
	// everything acknowledged: what it holds is what it can recover. (A
	// member that lags when the others die loses what it lacks; the test
	// is of recovery, not of that loss, which docs/backup.md describes.)
	requireValues(t, survivor.MemcacheAddr, acked)
	for i, p := range procs {
		if p != survivor {
			procs[i].Kill() // for good: never restarted
		}
	}
	survivor.Kill()

	forced := survivor.RelaunchWith("--force-new-cluster")
	forced.WaitReady()
	require.Contains(t, forced.Log.String(), "FORCE-NEW-CLUSTER")
	st := clusterStatus(t, forced)
	require.Len(t, st.Members, 1, "%+v", st)
	require.Equal(t, survivor.Name, st.Members[0].Name)
	require.Equal(t, "voter", st.Members[0].Kind)
	require.Equal(t, "leader", role(t, forced))
	requireValues(t, forced.MemcacheAddr, acked)
	cj, err := os.ReadFile(filepath.Join(forced.DataDir, "cluster.json"))
	require.NoError(t, err)
	require.Contains(t, string(cj), "forced_new_cluster")

	// Two fresh members join the recovered cluster.
	joined := make([]*kvdproc.Proc, 2)
	for i := range joined {
		name := fmt.Sprintf("n%d", i+4)
		joined[i] = kvdproc.Launch(t, filepath.Join(t.TempDir(), name), name,
			"--peer-addr", kvdproc.FreeAddr(t), "--join", "http://"+forced.HTTPAddr)
		joined[i].WaitReady()
		waitMember(t, forced, name, "voter", 30*time.Second)
	}
	setUntilOK(t, joined[0].MemcacheAddr, "after-recovery", "yes", 10*time.Second)
	requireValues(t, joined[1].MemcacheAddr, map[string]string{"after-recovery": "yes", "fk-000": "value 0", "fk-199": "value 199"})

	// The flag was a one-time action: the member restarts without it,
	// still one of three, with nothing forced again.
	forced.Stop()
	again := survivor.Restart()
	require.NotContains(t, again.Log.String(), "FORCE-NEW-CLUSTER")
	require.Len(t, clusterStatus(t, again).Members, 3)
	setUntilOK(t, again.MemcacheAddr, "after-restart", "yes", 10*time.Second)
	requireValues(t, again.MemcacheAddr, acked)
	requireValues(t, joined[1].MemcacheAddr, map[string]string{"after-restart": "yes"})
}

// TestForceNewClusterRefusesAnEmptyDataDir: there is no member to recover,
// and nothing is written into the dir.
func TestForceNewClusterRefusesAnEmptyDataDir(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{name: "empty data dir", want: "the data dir holds no raft log"},
		{name: "a witness", extra: []string{"--witness", "--join", "http://127.0.0.1:1"}, want: "a witness holds no data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "n1")
			args := append([]string{"serve", "--force-new-cluster", "--name", "n1", "--data-dir", dir,
				"--memcache-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"}, tc.extra...)
			out, err := kvdCLI(t, args...)
			require.Error(t, err, out)
			require.Contains(t, out, tc.want)
			require.NoDirExists(t, dir)
		})
	}
}
