package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/membership"
	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// runServe runs kvd serve on dir for a start expected to fail, and returns
// its exit code and log (-1 if it still ran after 30s, then killed).
func runServe(t *testing.T, dir, name string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvdproc.Binary(t), append([]string{"serve", "--name", name, "--data-dir", dir,
		"--memcache-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"}, args...)...)
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return -1, string(out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// failoverLoad is three writers of unique keys that send each write to a
// data member and, when it fails, to the other: what a client configured
// with both data members does. It remembers every acknowledged write.
type failoverLoad struct {
	load               // mu guards addrs too
	addrs []string     // the data members' memcache addresses, as they move
	count atomic.Int64 // acknowledged writes
}

func startFailoverLoad(t *testing.T, addrs ...string) *failoverLoad {
	l := &failoverLoad{load: load{stopc: make(chan struct{}), acked: map[string]string{}}, addrs: addrs}
	for w := range 3 {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			at := w % len(addrs)
			clients := map[string]*memcache.Client{}
			for i := 0; i < 200000; i++ {
				select {
				case <-l.stopc:
					return
				default:
				}
				l.mu.Lock()
				addr := l.addrs[at%len(l.addrs)]
				l.mu.Unlock()
				c := clients[addr]
				if c == nil {
					c = mcClient(addr)
					c.Timeout = time.Second
					clients[addr] = c
				}
				k, v := fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("v%d", i)
				if c.Set(&memcache.Item{Key: k, Value: []byte(v)}) == nil {
					l.mu.Lock()
					l.acked[k] = v
					l.mu.Unlock()
					l.count.Add(1)
				} else {
					at++
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	t.Cleanup(func() { l.stop() })
	return l
}

func (l *failoverLoad) moved(i int, addr string) {
	l.mu.Lock()
	l.addrs[i] = addr
	l.mu.Unlock()
}

// requireProgress fails unless writes are acknowledged within the second
// after from (a member being down, the other data member serving).
func (l *failoverLoad) requireProgress(t *testing.T, what string) {
	t.Helper()
	before := l.count.Load()
	deadline := time.Now().Add(5 * time.Second)
	for l.count.Load() < before+50 {
		require.True(t, time.Now().Before(deadline), "%s: writes stopped (%d acknowledged in 5s)", what, l.count.Load()-before)
		time.Sleep(10 * time.Millisecond)
	}
}

// waitCaughtUp waits until p has applied what the data members had
// committed when it started waiting.
func waitCaughtUp(t *testing.T, p *kvdproc.Proc, data []*kvdproc.Proc) {
	t.Helper()
	var want uint64
	for _, q := range data {
		want = max(want, clusterStatus(t, q).Commit)
	}
	deadline := time.Now().Add(30 * time.Second)
	for clusterStatus(t, p).Applied < want {
		require.True(t, time.Now().Before(deadline), "%s did not apply index %d within 30s", p.Name, want)
		time.Sleep(20 * time.Millisecond)
	}
}

// requireAllRead checks that every acknowledged write reads back from p.
func requireAllRead(t *testing.T, p *kvdproc.Proc, acked map[string]string) {
	t.Helper()
	c := mcClient(p.MemcacheAddr)
	c.Timeout = 5 * time.Second
	keys := make([]string, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
	}
	for len(keys) > 0 {
		n := min(len(keys), 200)
		items, err := c.GetMulti(keys[:n])
		require.NoError(t, err)
		for _, k := range keys[:n] {
			it, ok := items[k]
			require.True(t, ok, "acknowledged write %s missing on %s", k, p.Name)
			require.Equal(t, acked[k], string(it.Value), "acknowledged write %s on %s", k, p.Name)
		}
		keys = keys[n:]
	}
}

// TestWitnessClusterSurvivesAnyOneMember is issue 46's promise: two data
// members and a witness, under three writers, lose each member in turn
// (SIGKILL, then a pause) and keep taking writes through the data member
// that is up; every acknowledged write reads back from both data members,
// which end identical.
func TestWitnessClusterSurvivesAnyOneMember(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts kvd processes under load")
	}
	procs := kvdproc.StartCluster(t, 3, "--initial-witnesses", "n3")
	st := clusterStatus(t, procs[0])
	for _, m := range st.Members {
		require.Equal(t, m.Name == "n3", m.Witness, "member %s", m.Name)
	}
	load := startFailoverLoad(t, procs[0].MemcacheAddr, procs[1].MemcacheAddr)
	load.requireProgress(t, "all up")

	for _, victim := range []int{leaderOf(t, procs[:2]), 0, 1, 2} {
		p := procs[victim]
		p.Kill()
		load.requireProgress(t, p.Name+" killed")
		procs[victim] = p.Restart()
		if victim < 2 {
			load.moved(victim, procs[victim].MemcacheAddr)
		}
		load.requireProgress(t, p.Name+" back")
		// Before the next member goes, the one back must hold what was
		// committed meanwhile: a data member down while the other lacks a
		// committed entry that the witness holds is the case that waits
		// for it rather than lose the entry (docs/witness.md).
		waitCaughtUp(t, procs[victim], procs[:2])
	}
	for _, victim := range []int{leaderOf(t, procs[:2]), 2} {
		p := procs[victim]
		p.Pause()
		load.requireProgress(t, p.Name+" paused")
		p.Resume()
		load.requireProgress(t, p.Name+" resumed")
		waitCaughtUp(t, p, procs[:2])
	}

	// The witness never led, and holds none of the data.
	for _, p := range procs {
		require.NotContains(t, p.Log.String(), fmt.Sprintf(`msg="leader changed" component=replica from=%d`, uint64(membership.IDOf("n3"))), p.Name)
		require.NotContains(t, p.Log.String(), fmt.Sprintf(` to=%d term=`, uint64(membership.IDOf("n3"))), p.Name)
	}
	acked := load.stop()
	t.Logf("%d writes acknowledged through kills and pauses of every member", len(acked))
	requireAllRead(t, procs[0], acked)
	requireAllRead(t, procs[1], acked)
	requireSameDigest(t, procs[0], procs[1])
	require.Equal(t, "0", dial(t, procs[2].MemcacheAddr).stat("curr_items"), "the witness holds no items")
}

// TestWitnessRefusesDataAndForeignDataDirs: a witness answers data
// requests with an error naming the data members, and a data dir started
// in the other role is refused.
func TestWitnessRefusesDataAndForeignDataDirs(t *testing.T) {
	procs := kvdproc.StartCluster(t, 3, "--initial-witnesses", "n3")
	w := procs[2]
	rc := dial(t, w.MemcacheAddr)
	// The data members' addresses are named once they have published them,
	// shortly after they are ready.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rc.send("set a 0 0 1\r\nx\r\n")
		l := rc.line()
		require.True(t, strings.HasPrefix(l, "SERVER_ERROR this member is a witness"), l)
		if strings.Contains(l, "n1 ("+procs[0].MemcacheAddr+")") && strings.Contains(l, "n2 ("+procs[1].MemcacheAddr+")") {
			break
		}
		require.True(t, time.Now().Before(deadline), l)
		time.Sleep(50 * time.Millisecond)
	}
	rc.send("get a\r\n")
	require.Contains(t, rc.line(), "SERVER_ERROR this member is a witness")
	rc.send("mg a v\r\n")
	require.Contains(t, rc.line(), "SERVER_ERROR this member is a witness")
	rc.send("version\r\n")
	require.True(t, strings.HasPrefix(rc.line(), "VERSION "))

	// The binary protocol, on its own connection: a GET of "a".
	bc := dial(t, w.MemcacheAddr)
	bc.send(string([]byte{0x80, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'a'}))
	var hdr [24]byte
	_, err := io.ReadFull(bc.r, hdr[:])
	require.NoError(t, err)
	require.Equal(t, byte(0x81), hdr[0])
	require.NotZero(t, binary.BigEndian.Uint16(hdr[6:8]), "a binary GET on a witness fails")
	body := make([]byte, binary.BigEndian.Uint32(hdr[8:12]))
	_, err = io.ReadFull(bc.r, body)
	require.NoError(t, err)
	require.Contains(t, string(body), "witness")

	resp, err := http.Get("http://" + w.HTTPAddr + "/v1/kv/a")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	require.Contains(t, string(body), `"code":"witness"`)
	require.Contains(t, string(body), "n2 ("+procs[1].HTTPAddr+")")

	// The witness refuses to be made leader.
	out, err := kvdCLI(t, "cluster", "transfer-leader", "n3", "--endpoints", procs[0].HTTPAddr)
	require.Error(t, err)
	require.Contains(t, out, "witness")
	out, err = kvdCLI(t, "cluster", "status", "--endpoints", w.HTTPAddr)
	require.NoError(t, err, out)
	require.Contains(t, out, "voter (witness)")

	// A data member's dir started as a witness, and the reverse.
	procs[1].Kill()
	w.Kill()
	for _, c := range []struct {
		dir, name string
		args      []string
		want      string
	}{
		{procs[1].DataDir, "n2", []string{"--witness"}, "belongs to a data member"},
		{w.DataDir, "n3", nil, "belongs to a witness"},
		// A witness founding a cluster of its own, or one its peers do
		// not know it a witness in.
		{filepath.Join(t.TempDir(), "lone"), "w", []string{"--witness"}, "a founding witness must be named in --initial-witnesses"},
		{filepath.Join(t.TempDir(), "unnamed"), "n3", []string{"--witness", "--initial-cluster", "n1=h1:1,n2=h2:1,n3=h3:1"},
			"a founding witness must be named in --initial-witnesses"},
	} {
		code, log := runServe(t, c.dir, c.name, c.args...)
		require.NotZero(t, code, log)
		require.Contains(t, log, c.want)
	}
	_, err = os.Stat(filepath.Join(procs[1].DataDir, "witness"))
	require.ErrorIs(t, err, os.ErrNotExist, "a refused start creates nothing")
}

// dirBytes is the size of the files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	}))
	return n
}

// TestWitnessJoinsAndIsReplaced grows a two-member cluster (which survives
// no loss) with a witness that joins after the log was compacted, so by a
// snapshot, which holds no items; then checks the cluster survives a data
// member's loss, refuses changes that would leave the witnesses as many as
// the data members, and replaces the witness online.
func TestWitnessJoinsAndIsReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five kvd processes")
	}
	compact := []string{"--snapshot-count", "20", "--snapshot-catchup-entries", "10"}
	procs := kvdproc.StartCluster(t, 2, compact...)
	mc := mcClient(procs[0].MemcacheAddr)
	mc.Timeout = 5 * time.Second
	value := strings.Repeat("x", 4096)
	for i := range 500 {
		require.NoError(t, mc.Set(&memcache.Item{Key: fmt.Sprintf("k%d", i), Value: []byte(value)}))
	}
	lead := leaderOf(t, procs)
	procs[lead].WaitClusterVersion() // a witness is added from version 6 on
	w := kvdproc.Launch(t, filepath.Join(t.TempDir(), "w"), "w", append([]string{"--peer-addr", kvdproc.FreeAddr(t),
		"--witness", "--join", "http://" + procs[lead].HTTPAddr}, compact...)...)
	w.WaitReady()
	waitMember(t, procs[lead], "w", "voter", 30*time.Second)
	require.Contains(t, procs[lead].Log.String(), "sent snapshot", "the witness joined behind the compacted log")
	// 2 MB of values went to the data members; the witness holds the
	// member table and the log's metadata.
	require.Less(t, dirBytes(t, w.DataDir)*4, dirBytes(t, procs[lead].DataDir), "witness %d bytes, data member %d",
		dirBytes(t, w.DataDir), dirBytes(t, procs[lead].DataDir))

	// Two data members and a witness: either data member may go.
	victim := procs[lead]
	other := procs[1-lead]
	victim.Kill()
	setUntilOK(t, other.MemcacheAddr, "after-kill", "v", 10*time.Second)
	procs[lead] = victim.Restart()
	lead = leaderOf(t, procs)

	// Refused: a second witness, and the removal of a data member.
	out, err := kvdCLI(t, "cluster", "add", "--witness", "w2", kvdproc.FreeAddr(t), "--endpoints", procs[0].HTTPAddr)
	require.Error(t, err)
	require.Contains(t, out, "outnumber the witnesses", out)
	out, err = kvdCLI(t, "cluster", "remove", procs[1-lead].Name, "--endpoints", procs[0].HTTPAddr)
	require.Error(t, err)
	require.Contains(t, out, "outnumber the witnesses", out)

	// Replaced: the old witness removed, a new one added and joined.
	out, err = kvdCLI(t, "cluster", "remove", "w", "--endpoints", procs[0].HTTPAddr)
	require.NoError(t, err, out)
	peer := kvdproc.FreeAddr(t)
	out, err = kvdCLI(t, "cluster", "add", "--witness", "w2", peer, "--endpoints", procs[1].HTTPAddr)
	require.NoError(t, err, out)
	require.Contains(t, out, "--witness --join")
	w2 := kvdproc.Launch(t, filepath.Join(t.TempDir(), "w2"), "w2", "--peer-addr", peer, "--witness", "--join", "http://"+procs[0].HTTPAddr)
	w2.WaitReady()
	waitMember(t, procs[lead], "w2", "voter", 30*time.Second)
	st := clusterStatus(t, procs[lead])
	require.Len(t, st.Members, 3)
	for _, m := range st.Members {
		require.Equal(t, m.Name == "w2", m.Witness, "member %s", m.Name)
	}
	procs[lead].Kill()
	setUntilOK(t, procs[1-lead].MemcacheAddr, "after-replace", "v", 10*time.Second)
	it, err := mcClient(procs[1-lead].MemcacheAddr).Get("k499")
	require.NoError(t, err)
	require.Equal(t, value, string(it.Value))
}

// TestWitnessWithAFullDiskStopsAndLosesNothing puts a witness's data dir
// on a small tmpfs that another program fills. The witness cannot persist
// what it would acknowledge, so it must stop acknowledging, loudly (its
// log names the cause, and it exits), while the two data members go on as
// a quorum of their own; given room, it starts again, catches up, and the
// cluster survives a data member's loss with every acknowledged write.
// It needs to mount a tmpfs (root, as in CI); elsewhere it is skipped.
func TestWitnessWithAFullDiskStopsAndLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a filesystem under a witness")
	}
	mnt := mountTmpfs(t, "24m")
	peers := []string{kvdproc.FreeAddr(t), kvdproc.FreeAddr(t), kvdproc.FreeAddr(t)}
	cluster := fmt.Sprintf("n1=%s,n2=%s,n3=%s", peers[0], peers[1], peers[2])
	procs := make([]*kvdproc.Proc, 3)
	for i := range procs {
		name := fmt.Sprintf("n%d", i+1)
		dir := filepath.Join(t.TempDir(), name)
		if i == 2 {
			dir = filepath.Join(mnt, name)
		}
		procs[i] = kvdproc.Launch(t, dir, name, "--peer-addr", peers[i], "--initial-cluster", cluster, "--initial-witnesses", "n3",
			"--min-free-disk", "0", "--snapshot-count", "500", "--snapshot-catchup-entries", "100")
	}
	for _, p := range procs {
		p.WaitReady()
	}
	w := procs[2]

	filler, err := os.Create(filepath.Join(mnt, "filler"))
	require.NoError(t, err)
	chunk := make([]byte, 1<<20)
	for range 64 { // more than the filesystem holds
		if _, err = filler.Write(chunk); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, syscall.ENOSPC, "the filler did not fill the filesystem")
	require.NoError(t, filler.Close())

	// Writes go on through the data members until the witness gives up,
	// once its raft log needs a segment it cannot have: a pipelined writer
	// gets there sooner than the three sequential ones.
	load := startFailoverLoad(t, procs[0].MemcacheAddr, procs[1].MemcacheAddr)
	pipelined := map[string]string{}
	rc := dial(t, procs[0].MemcacheAddr)
	const depth = 64
	for i := 0; ; i += depth {
		var b strings.Builder
		for j := i; j < i+depth; j++ {
			fmt.Fprintf(&b, "set p%d 0 0 %d\r\nv%d\r\n", j, len(fmt.Sprint(j))+1, j)
		}
		require.NoError(t, rc.c.SetDeadline(time.Now().Add(30*time.Second)))
		rc.send(b.String())
		for j := i; j < i+depth; j++ {
			if rc.line() == "STORED" {
				pipelined[fmt.Sprintf("p%d", j)] = fmt.Sprintf("v%d", j)
			}
		}
		select {
		case <-w.Exited():
		default:
			require.Less(t, i, 2_000_000, "the witness still runs after 2 M writes it cannot persist\n%s", tail(w.Log.String(), 20))
			continue
		}
		break
	}
	load.requireProgress(t, "the witness stopped")
	log := w.Log.String()
	require.NotZero(t, w.ExitCode(), "the witness exited cleanly although it could not write\n%s", log)
	require.Contains(t, log, "no space left on device", "the log names the cause")

	// Room again: the witness comes back and the cluster survives a data
	// member's loss with it.
	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))
	procs[2] = w.Restart()
	lead := leaderOf(t, procs[:2])
	load.requireProgress(t, "the witness back")
	procs[lead].Kill()
	load.requireProgress(t, procs[lead].Name+" killed")
	acked := load.stop()
	t.Logf("%d writes acknowledged, and %d pipelined ones", len(acked), len(pipelined))
	requireAllRead(t, procs[1-lead], acked)
	requireAllRead(t, procs[1-lead], pipelined)
}
