package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// backupWrite is one acknowledged write of the backup test's load: each
// key is written once, so what the restored cluster holds is exactly it.
type backupWrite struct {
	value      string
	flags      uint32
	ttl        int32 // seconds, relative; 0: never
	sent, ackd time.Time
}

// backupLoad writes unique keys with varied flags and TTLs through each
// address until stopped, remembering every acknowledged write.
type backupLoad struct {
	stopc chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[string]backupWrite
}

func startBackupLoad(addrs ...string) *backupLoad {
	l := &backupLoad{stopc: make(chan struct{}), acked: map[string]backupWrite{}}
	for w, addr := range addrs {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c := mcClient(addr)
			c.Timeout = 2 * time.Second
			for i := 0; ; i++ {
				select {
				case <-l.stopc:
					return
				default:
				}
				k := fmt.Sprintf("bk-%d-%06d", w, i)
				bw := backupWrite{value: fmt.Sprintf("value %d/%d ", w, i) + strings.Repeat("v", i%300),
					flags: uint32(i * 7919), ttl: []int32{0, 3600, 600}[i%3], sent: time.Now()}
				err := c.Set(&memcache.Item{Key: k, Value: []byte(bw.value), Flags: bw.flags, Expiration: bw.ttl})
				bw.ackd = time.Now()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				l.mu.Lock()
				l.acked[k] = bw
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// snapshotAcked copies what is acknowledged so far.
func (l *backupLoad) snapshotAcked() map[string]backupWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]backupWrite, len(l.acked))
	for k, v := range l.acked {
		out[k] = v
	}
	return out
}

func (l *backupLoad) stop() {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	l.wg.Wait()
}

// TestSnapshotSaveRestoreIntoANewCluster saves a snapshot from a follower
// of a 3-node cluster under a write load, loses the cluster, restores the
// file into three fresh data dirs and starts a new cluster on them: every
// write acknowledged before the save began is there, with its value, flags
// and expiry.
func TestSnapshotSaveRestoreIntoANewCluster(t *testing.T) {
	procs := kvdproc.StartCluster(t, 3)
	lead := leaderOf(t, procs)
	follower := procs[(lead+1)%3]
	load := startBackupLoad(procs[0].MemcacheAddr, procs[1].MemcacheAddr, procs[2].MemcacheAddr)
	t.Cleanup(load.stop)
	// Some load before the save, and the save while the load goes on.
	deadline := time.Now().Add(20 * time.Second)
	for len(load.snapshotAcked()) < 3000 {
		require.True(t, time.Now().Before(deadline), "the load acknowledged only %d writes", len(load.snapshotAcked()))
		time.Sleep(50 * time.Millisecond)
	}
	before := load.snapshotAcked()
	file := filepath.Join(t.TempDir(), "backup.kvdsnap")
	out, err := kvdCLI(t, "snapshot", "save", file, "--endpoints", "http://"+follower.HTTPAddr, "--json")
	require.NoError(t, err, out)
	load.stop()
	var sum struct {
		Items   uint64 `json:"items"`
		Applied uint64 `json:"applied_index"`
		Member  string `json:"member"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &sum), out)
	require.Equal(t, follower.Name, sum.Member)
	require.GreaterOrEqual(t, sum.Items, uint64(len(before)))
	require.NoFileExists(t, file+".part")

	out, err = kvdCLI(t, "snapshot", "status", file)
	require.NoError(t, err, out)
	require.Contains(t, out, "(ok)")
	require.Contains(t, out, fmt.Sprintf("items:           %d", sum.Items))

	for _, p := range procs {
		p.Kill()
	}

	// The new cluster: other names, other ports (chosen free, so another
	// process may take one before kvd binds it: then again on new ones).
	var restored []*kvdproc.Proc
	for attempt := 1; restored == nil; attempt++ {
		require.LessOrEqual(t, attempt, 3, "the restored cluster lost a port race three times")
		restored = restoreCluster(t, file)
	}
	for _, p := range restored {
		p.WaitReady()
	}
	for k, w := range before {
		p := restored[len(k)%3]
		resp, err := http.Get("http://" + p.HTTPAddr + "/v1/kv/" + k)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s acknowledged before the save began: %s", k, body)
		require.Equal(t, w.value, string(body), k)
		require.Equal(t, strconv.FormatUint(uint64(w.flags), 10), resp.Header.Get("X-Kvd-Flags"), k)
		exp := resp.Header.Get("X-Kvd-Expires")
		if w.ttl == 0 {
			require.Empty(t, exp, k)
			continue
		}
		at, err := strconv.ParseInt(exp, 10, 64)
		require.NoError(t, err, "%s: X-Kvd-Expires %q", k, exp)
		// Stamped between send and acknowledgement; the header is the
		// first whole second at which it is gone.
		require.GreaterOrEqual(t, at, w.sent.Unix()+int64(w.ttl), k)
		require.LessOrEqual(t, at, w.ackd.Unix()+int64(w.ttl)+1, k)
	}
	// The new cluster takes writes, and is a cluster of its own.
	setUntilOK(t, restored[0].MemcacheAddr, "after-restore", "yes", 10*time.Second)
	var cl struct {
		Members []struct{ Name string } `json:"members"`
	}
	kvdproc.GetJSON(t, restored[1].HTTPAddr, "/v1/cluster", &cl)
	require.Len(t, cl.Members, 3)
}

// TestSnapshotRestoreRefuses: a damaged file or a data dir in use is a
// clear error with a non-zero exit, and builds nothing.
func TestSnapshotRestoreRefuses(t *testing.T) {
	p := kvdproc.Start(t, filepath.Join(t.TempDir(), "n1"))
	c := mcClient(p.MemcacheAddr)
	for i := range 50 {
		require.NoError(t, c.Set(&memcache.Item{Key: fmt.Sprintf("k%d", i), Value: []byte("v")}))
	}
	file := filepath.Join(t.TempDir(), "backup.kvdsnap")
	out, err := kvdCLI(t, "snapshot", "save", file, "--endpoints", "http://"+p.HTTPAddr)
	require.NoError(t, err, out)
	good, err := os.ReadFile(file)
	require.NoError(t, err)

	damaged := filepath.Join(t.TempDir(), "damaged.kvdsnap")
	b := append([]byte(nil), good...)
	b[len(b)/2] ^= 0x40
	require.NoError(t, os.WriteFile(damaged, b, 0o600))
	truncated := filepath.Join(t.TempDir(), "truncated.kvdsnap")
	require.NoError(t, os.WriteFile(truncated, good[:len(good)-10], 0o600))
	used := filepath.Join(t.TempDir(), "used")
	require.NoError(t, os.MkdirAll(used, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(used, "cluster.json"), []byte("{}"), 0o600))

	for _, tc := range []struct {
		name, file, dir, want string
	}{
		{"damaged", damaged, filepath.Join(t.TempDir(), "d"), "checksum mismatch"},
		{"truncated", truncated, filepath.Join(t.TempDir(), "d"), "truncated"},
		{"data dir in use", file, used, "not empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := kvdCLI(t, "snapshot", "restore", tc.file, "--data-dir", tc.dir, "--name", "n1", "--initial-cluster", "n1=127.0.0.1:1")
			require.Error(t, err, out)
			require.Contains(t, out, tc.want)
			if tc.dir != used {
				require.NoDirExists(t, tc.dir)
				require.NoDirExists(t, tc.dir+".restoring")
			}
			out, err = kvdCLI(t, "snapshot", "status", tc.file)
			if tc.dir != used {
				require.Error(t, err, out)
				require.Contains(t, out, tc.want)
			}
		})
	}
}

// restoreCluster restores file into three fresh members r1..r3 of a new
// cluster and starts them; nil when one lost a race for its peer port.
func restoreCluster(t *testing.T, file string) []*kvdproc.Proc {
	t.Helper()
	var members []string
	for i := 1; i <= 3; i++ {
		members = append(members, fmt.Sprintf("r%d=%s", i, kvdproc.FreeAddr(t)))
	}
	ic := strings.Join(members, ",")
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = filepath.Join(t.TempDir(), fmt.Sprintf("r%d", i+1))
		out, err := kvdCLI(t, "snapshot", "restore", file, "--data-dir", dirs[i], "--name", fmt.Sprintf("r%d", i+1), "--initial-cluster", ic)
		require.NoError(t, err, out)
	}
	restored := make([]*kvdproc.Proc, 3)
	for i := range restored {
		peer := strings.SplitN(members[i], "=", 2)[1]
		p, err := kvdproc.TryLaunch(t, dirs[i], fmt.Sprintf("r%d", i+1), "--peer-addr", peer, "--initial-cluster", ic)
		if kvdproc.PortTaken(err) {
			t.Logf("restored member r%d lost a port race; restoring again on new ports", i+1)
			for _, q := range restored[:i] {
				q.Kill()
			}
			return nil
		}
		require.NoError(t, err)
		restored[i] = p
	}
	return restored
}
