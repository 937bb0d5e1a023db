package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

func snapValue(i int) string {
	return fmt.Sprintf("value-%06d-", i) + strings.Repeat("x", 500)
}

// waitLog polls p's log for s.
func waitLog(t *testing.T, p *kvdproc.Proc, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.Log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %s\n%s", p.Name, s, within, p.Log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// localGet reads key from p's own state (no barrier): what p holds.
func localGet(t *testing.T, p *kvdproc.Proc, key string) (string, bool) {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTPAddr + "/v1/kv/" + key + "?consistency=local")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusNotFound {
		return "", false
	}
	require.Equal(t, http.StatusOK, resp.StatusCode, "local get %s on %s: %s", key, p.Name, body)
	return string(body), true
}

// TestFollowerCatchesUpBySnapshot stops a follower while the leader writes
// far past its compaction window, then restarts it: it can only catch up
// from a snapshot (a streamed Pebble checkpoint) and then the log. It is
// killed right after the install and restarted, and finally it must serve
// every key from its own state after the leader dies.
func TestFollowerCatchesUpBySnapshot(t *testing.T) {
	procs := kvdproc.StartCluster(t, 3, "--snapshot-count", "200", "--snapshot-catchup-entries", "50")
	lead := leaderOf(t, procs)
	lag := (lead + 1) % 3
	setUntilOK(t, procs[lead].MemcacheAddr, "warmup", "v", 10*time.Second)
	procs[lag].Stop()

	const keys = 4000
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := mcClient(procs[lead].MemcacheAddr)
			c.Timeout = 5 * time.Second
			for i := w; i < keys; i += 8 {
				if err := c.Set(&memcache.Item{Key: fmt.Sprintf("snap-%d", i), Value: []byte(snapValue(i))}); err != nil {
					errs <- fmt.Errorf("set snap-%d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("wrote %d keys in %s with a follower down", keys, time.Since(start))

	// The follower is far behind the leader's compacted log: only a
	// snapshot brings it back.
	restartAt := time.Now()
	procs[lag] = procs[lag].Restart()
	waitLog(t, procs[lag], "installed snapshot", 30*time.Second)
	t.Logf("follower installed a snapshot %s after its restart", time.Since(restartAt))
	if m := regexp.MustCompile(`msg="sent snapshot".*bytes=(\d+) duration=(\S+)`).FindStringSubmatch(procs[lead].Log.String()); m != nil {
		t.Logf("leader sent the snapshot: %s bytes in %s", m[1], m[2])
	}
	if m := regexp.MustCompile(`msg="installed snapshot".*`).FindString(procs[lag].Log.String()); m != "" {
		t.Logf("follower: %s", m)
	}
	// Operators see it in /metrics on both ends.
	require.GreaterOrEqual(t, metricValue(t, procs[lag].HTTPAddr, "kvd_raft_snapshots_installed_total"), 1.0)
	require.GreaterOrEqual(t, metricValue(t, procs[lag].HTTPAddr, "kvd_raft_snapshots_received_total"), 1.0)
	// The leader counts a snapshot sent once it reads the follower's
	// acknowledgement, which may come after the install is logged.
	require.Eventually(t, func() bool {
		return metricValue(t, procs[lead].HTTPAddr, "kvd_raft_snapshots_sent_total") >= 1
	}, 10*time.Second, 50*time.Millisecond)

	// A crash right after the install, then a restart from that state.
	procs[lag].Kill()
	procs[lag] = procs[lag].Restart()

	// It catches up (snapshot, then log) and holds every key locally.
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, ok := localGet(t, procs[lag], fmt.Sprintf("snap-%d", keys-1))
		if ok && v == snapValue(keys-1) {
			break
		}
		require.True(t, time.Now().Before(deadline), "follower never caught up\n%s", procs[lag].Log.String())
		time.Sleep(50 * time.Millisecond)
	}

	// Without the leader, the two survivors (one of them the node that was
	// behind) keep the data and take writes.
	procs[lead].Kill()
	setUntilOK(t, procs[lag].MemcacheAddr, "after-leader-kill", "v", 15*time.Second)
	for i := range keys {
		v, ok := localGet(t, procs[lag], fmt.Sprintf("snap-%d", i))
		require.True(t, ok, "snap-%d missing on the node that was behind", i)
		require.Equal(t, snapValue(i), v)
	}
	v, ok := localGet(t, procs[lag], "warmup")
	require.True(t, ok)
	require.Equal(t, "v", v)
	require.NotContains(t, procs[lag].Log.String(), "state store is behind its log")
}
