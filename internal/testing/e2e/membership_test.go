package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/cli"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// kvdCLI runs the kvd binary with args and returns its combined output.
func kvdCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(kvdproc.Binary(t), args...).CombinedOutput()
	return string(out), err
}

func clusterStatus(t *testing.T, p *kvdproc.Proc) httpapi.ClusterStatus {
	t.Helper()
	var st httpapi.ClusterStatus
	kvdproc.GetJSON(t, p.HTTPAddr, "/v1/cluster", &st)
	return st
}

// waitMember polls p's view until member name has the given kind.
func waitMember(t *testing.T, p *kvdproc.Proc, name, kind string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, m := range clusterStatus(t, p).Members {
			if m.Name == name && m.Kind == kind {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not a %s within %s: %+v", name, kind, within, clusterStatus(t, p))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHealth polls p's view until member name has the given health.
func waitHealth(t *testing.T, p *kvdproc.Proc, name, health string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, m := range clusterStatus(t, p).Members {
			if m.Name == name && m.Health == health {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not %s within %s: %+v", name, health, within, clusterStatus(t, p))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMembershipAddTransferRemove(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four kvd processes")
	}
	procs := kvdproc.StartCluster(t, 3)
	mc := mcClient(procs[0].MemcacheAddr)
	mc.Timeout = 5 * time.Second
	for i := 0; i < 50; i++ {
		require.NoError(t, mc.Set(&memcache.Item{Key: fmt.Sprintf("k%d", i), Value: []byte(fmt.Sprint(i))}))
	}
	// Every membership change below happens under a write load.
	load := startLoad(t, procs[0].MemcacheAddr, procs[1].MemcacheAddr, procs[2].MemcacheAddr)

	// Register n4 through a follower (it forwards to the leader), then
	// start it with --join: the second registration is a no-op.
	lead := leaderOf(t, procs)
	follower := procs[(lead+1)%3]
	peer := kvdproc.FreeAddr(t)
	out, err := kvdCLI(t, "cluster", "add", "n4", peer, "--endpoints", follower.HTTPAddr)
	require.NoError(t, err, out)
	require.Contains(t, out, "added n4")
	n4 := kvdproc.Launch(t, filepath.Join(t.TempDir(), "n4"), "n4", "--peer-addr", peer, "--join", "http://"+follower.HTTPAddr)
	n4.WaitReady()
	waitMember(t, procs[lead], "n4", "voter", 30*time.Second)

	// The new member has everything written before it joined.
	c4 := mcClient(n4.MemcacheAddr)
	c4.Timeout = 5 * time.Second
	for i := 0; i < 50; i++ {
		it, err := c4.Get(fmt.Sprintf("k%d", i))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), string(it.Value))
	}

	out, err = kvdCLI(t, "cluster", "status", "--endpoints", n4.HTTPAddr)
	require.NoError(t, err, out)
	for _, name := range []string{"n1", "n2", "n3", "n4"} {
		require.Contains(t, out, name)
	}
	require.NotContains(t, out, "unhealthy", out)

	// Hand leadership to n4.
	out, err = kvdCLI(t, "cluster", "transfer-leader", "n4", "--endpoints", procs[lead].HTTPAddr)
	require.NoError(t, err, out)
	require.Contains(t, out, "leader is now n4")
	all := append(append([]*kvdproc.Proc{}, procs...), n4)
	require.Equal(t, 3, leaderOf(t, all))

	// A dead member can be removed; removing a live one that would leave
	// too few reachable voters is refused, and the cluster keeps serving.
	procs[2].Kill()
	out, err = kvdCLI(t, "cluster", "remove", "n3", "--endpoints", n4.HTTPAddr)
	require.NoError(t, err, out)
	procs[1].Kill()
	waitHealth(t, n4, "n2", "unhealthy", 10*time.Second)
	out, err = kvdCLI(t, "cluster", "remove", "n1", "--endpoints", n4.HTTPAddr)
	if err == nil {
		// What each survivor saw tells why. The first such failure: a
		// leader of 60 ms showed n2 unhealthy for not having heard it yet,
		// then n2's answers from just before it died let the check count
		// it (now the check needs the connection to be up, and a new
		// leader reports members it has not heard yet as unknown).
		t.Logf("n4's view after the removal: %+v", clusterStatus(t, n4))
		t.Logf("n4's log:\n%s", n4.Log.String())
		t.Logf("n1's log:\n%s", procs[0].Log.String())
	}
	require.Error(t, err, out)
	require.Contains(t, out, "quorum")
	setUntilOK(t, n4.MemcacheAddr, "after-remove", "v", 10*time.Second)
	for _, m := range clusterStatus(t, n4).Members {
		require.NotEqual(t, "n3", m.Name, "n3 still listed after removal")
	}

	acked := load.stop()
	require.NotEmpty(t, acked)
	c4.Timeout = 5 * time.Second
	for k, v := range acked {
		it, err := c4.Get(k)
		require.NoError(t, err, "acknowledged write %s", k)
		require.Equal(t, v, string(it.Value), "acknowledged write %s", k)
	}
	t.Logf("%d writes acknowledged during the changes, all present", len(acked))
	requireSameDigest(t, procs[0], n4)

	// n3 was removed while it was down. Started again, it learns so from
	// the leader, which refuses its connection as a non-member, and stops
	// with the removed member's exit status instead of waiting, not ready,
	// for a leader that will never send it anything.
	code, log := procs[2].RunAgain(30 * time.Second)
	require.Equal(t, cli.ExitRemoved, code, "n3 started again after its removal:\n%s", log)
	require.Contains(t, log, "removed from the cluster while it was away")
}

// load writes unique keys over the given servers until stopped and
// remembers every acknowledged write.
type load struct {
	stopc chan struct{}
	done  sync.WaitGroup
	mu    sync.Mutex
	acked map[string]string
}

func startLoad(t *testing.T, addrs ...string) *load {
	l := &load{stopc: make(chan struct{}), acked: map[string]string{}}
	for w, addr := range addrs {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			c := mcClient(addr)
			c.Timeout = 2 * time.Second
			for i := 0; i < 100000; i++ {
				select {
				case <-l.stopc:
					return
				default:
				}
				k, v := fmt.Sprintf("load-%d-%d", w, i), fmt.Sprintf("v%d", i)
				if c.Set(&memcache.Item{Key: k, Value: []byte(v)}) == nil {
					l.mu.Lock()
					l.acked[k] = v
					l.mu.Unlock()
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	t.Cleanup(func() { l.stop() })
	return l
}

func (l *load) stop() map[string]string {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

func digestOf(t *testing.T, p *kvdproc.Proc) httpapi.ClusterDigest {
	t.Helper()
	var d httpapi.ClusterDigest
	kvdproc.GetJSON(t, p.HTTPAddr, "/v1/cluster/digest", &d)
	return d
}

// requireSameDigest waits until the nodes have applied the same index and
// checks they hold identical state there.
func requireSameDigest(t *testing.T, procs ...*kvdproc.Proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds := make([]httpapi.ClusterDigest, len(procs))
		same := true
		for i, p := range procs {
			ds[i] = digestOf(t, p)
			same = same && ds[i].Applied == ds[0].Applied
		}
		if same {
			for i := range ds {
				require.Equal(t, ds[0].Sum, ds[i].Sum, "replicas %s and %s differ at applied index %d", procs[0].Name, procs[i].Name, ds[0].Applied)
			}
			t.Logf("%d replicas identical at applied index %d (%d keys)", len(procs), ds[0].Applied, ds[0].Keys)
			return
		}
		require.True(t, time.Now().Before(deadline), "replicas never reached one applied index: %+v", ds)
		time.Sleep(50 * time.Millisecond)
	}
}

func TestJoinGrowsSingleNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two kvd processes")
	}
	n1 := kvdproc.Start(t, filepath.Join(t.TempDir(), "n1"), "--peer-addr", kvdproc.FreeAddr(t))
	mc := mcClient(n1.MemcacheAddr)
	require.NoError(t, mc.Set(&memcache.Item{Key: "before", Value: []byte("join")}))

	n2 := kvdproc.Launch(t, filepath.Join(t.TempDir(), "n2"), "n2", "--peer-addr", kvdproc.FreeAddr(t), "--join", "http://"+n1.HTTPAddr)
	n2.WaitReady()
	waitMember(t, n1, "n2", "voter", 30*time.Second)
	it, err := mcClient(n2.MemcacheAddr).Get("before")
	require.NoError(t, err)
	require.Equal(t, "join", string(it.Value))
	// Writes now need both: through n2 they commit on n1 too.
	setUntilOK(t, n2.MemcacheAddr, "after", "v", 10*time.Second)
	it, err = mc.Get("after")
	require.NoError(t, err)
	require.Equal(t, "v", string(it.Value))
	// Each member publishes where clients reach it, once it is ready.
	require.Eventually(t, func() bool {
		for _, m := range clusterStatus(t, n1).Members {
			if m.HTTPAddr == "" {
				return false
			}
		}
		return true
	}, 15*time.Second, 50*time.Millisecond, "a member never published its HTTP address: %+v", clusterStatus(t, n1))
}

func TestSIGTERMHandsOffLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three kvd processes")
	}
	procs := kvdproc.StartCluster(t, 3)
	lead := leaderOf(t, procs)
	procs[lead].Stop()
	require.Contains(t, procs[lead].Log.String(), "transferred leadership before shutdown")
	rest := []*kvdproc.Proc{}
	for i, p := range procs {
		if i != lead {
			rest = append(rest, p)
		}
	}
	leaderOf(t, rest)
	setUntilOK(t, rest[0].MemcacheAddr, "after-handoff", "v", 10*time.Second)
	require.False(t, strings.Contains(procs[lead].Log.String(), "leadership transfer before shutdown failed"))
}

// TestJoinAfterCompaction: a member added after the log was compacted is
// sent a snapshot that names it, so it joins with no further writes. Before
// the fix the snapshot described the compaction point, whose configuration
// predates the new member; raft on the new member refused it and the leader
// resent it until a later compaction (robustness fault replace-follower).
func TestJoinAfterCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four kvd processes")
	}
	procs := kvdproc.StartCluster(t, 3, "--snapshot-count", "20", "--snapshot-catchup-entries", "10")
	mc := mcClient(procs[0].MemcacheAddr)
	mc.Timeout = 5 * time.Second
	for i := 0; i < 200; i++ {
		require.NoError(t, mc.Set(&memcache.Item{Key: fmt.Sprintf("k%d", i), Value: []byte(fmt.Sprint(i))}))
	}
	lead := leaderOf(t, procs)
	n4 := kvdproc.Launch(t, filepath.Join(t.TempDir(), "n4"), "n4", "--peer-addr", kvdproc.FreeAddr(t),
		"--snapshot-count", "20", "--snapshot-catchup-entries", "10", "--join", "http://"+procs[lead].HTTPAddr)
	n4.WaitReady()
	waitMember(t, procs[lead], "n4", "voter", 30*time.Second)
	c4 := mcClient(n4.MemcacheAddr)
	c4.Timeout = 5 * time.Second
	for i := 0; i < 200; i++ {
		it, err := c4.Get(fmt.Sprintf("k%d", i))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), string(it.Value))
	}
	requireSameDigest(t, procs[lead], n4)
}

// TestRejoinUnderTheSameName: a removed member whose data was wiped joins
// again under its old name (so its old raft ID). Catching up from the log,
// it replays its own earlier removal; it must not take that for its fate
// and stop.
func TestRejoinUnderTheSameName(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four kvd processes")
	}
	procs := kvdproc.StartCluster(t, 3)
	mc := mcClient(procs[0].MemcacheAddr)
	mc.Timeout = 5 * time.Second
	require.NoError(t, mc.Set(&memcache.Item{Key: "before", Value: []byte("v")}))
	lead := leaderOf(t, procs)
	gone := procs[(lead+1)%3]
	out, err := kvdCLI(t, "cluster", "remove", gone.Name, "--endpoints", procs[lead].HTTPAddr)
	require.NoError(t, err, out)
	// The leader answers once it applied the removal: its entry is at or
	// before this.
	removedBy := clusterStatus(t, procs[lead]).Applied
	select {
	case <-gone.Exited():
	case <-time.After(15 * time.Second):
		t.Fatalf("%s still running 15s after its removal", gone.Name)
	}
	require.Equal(t, cli.ExitRemoved, gone.ExitCode(), gone.Log.String())
	// Started again on its data, it stops again, as the systemd unit's
	// RestartPreventExitStatus expects.
	code, log := gone.RunAgain(30 * time.Second)
	require.Equal(t, cli.ExitRemoved, code, "%s started again after its removal:\n%s", gone.Name, log)
	require.Contains(t, log, "removed from the cluster")
	setUntilOK(t, procs[lead].MemcacheAddr, "between", "v", 10*time.Second)

	back := kvdproc.Launch(t, filepath.Join(t.TempDir(), gone.Name+"-again"), gone.Name,
		"--peer-addr", kvdproc.FreeAddr(t), "--join", "http://"+procs[lead].HTTPAddr)
	back.WaitReady()
	waitMember(t, procs[lead], gone.Name, "voter", 30*time.Second)
	// It keeps the point its membership starts from, after its removal:
	// before that point, being left out of a configuration is history.
	var saved struct {
		AddedAt uint64 `json:"added_at"`
	}
	b, err := os.ReadFile(filepath.Join(back.DataDir, "cluster.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &saved))
	require.Greater(t, saved.AddedAt, removedBy, "cluster.json: %s", b)
	// Still a member a while later, serving reads and writes.
	time.Sleep(time.Second)
	select {
	case <-back.Exited():
		t.Fatalf("%s stopped after rejoining\n%s", gone.Name, back.Log.String())
	default:
	}
	setUntilOK(t, back.MemcacheAddr, "after", "v", 10*time.Second)
	for _, k := range []string{"before", "between", "after"} {
		it, err := mcClient(back.MemcacheAddr).Get(k)
		require.NoError(t, err, k)
		require.Equal(t, "v", string(it.Value))
	}
	requireSameDigest(t, procs[lead], back)
}

// TestSIGTERMWhileJoiningExitsCleanly: a joining node retries its join
// while the member it asks does not answer; SIGTERM then stops it, and,
// as a SIGTERM at any other time, with status 0: systemd marks a unit
// that exits non-zero on `systemctl stop` as failed.
func TestSIGTERMWhileJoiningExitsCleanly(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	cmd := exec.Command(kvdproc.Binary(t), "serve", "--name", "n2", "--data-dir", t.TempDir(),
		"--memcache-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--peer-addr", kvdproc.FreeAddr(t),
		"--join", "http://"+kvdproc.FreeAddr(t)) // nobody listens there
	cmd.Stderr = writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(b) })
	require.NoError(t, cmd.Start())
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	// A failure before the SIGTERM below must not leave this kvd retrying
	// its join for ever: kill it (this PID only), unless it is gone.
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(logs.String(), "joining cluster") },
		30*time.Second, 10*time.Millisecond, "the join never started")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		mu.Lock()
		defer mu.Unlock()
		require.NoError(t, err, "exit status after SIGTERM during the join; log:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("SIGTERM did not stop the join")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
