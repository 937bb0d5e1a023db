package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// TestRealFullDiskStopsTheNodeAndLosesNothing runs kvd on a real
// filesystem that another program fills: a 200 MiB tmpfs, the free-space
// floor off (--min-free-disk 0, which would otherwise refuse writes
// first). The raft log goes on writing inside its preallocated segment,
// while the state store's flushes fail and Pebble stalls its writes: the
// node answers `SERVER_ERROR timeout` (the outcome of that write is
// unknown) or, once the raft log needs a new segment, stops on the error.
// Either way it must leave when told (SIGTERM) or by itself, promptly,
// with a non-zero exit, without flooding its log (Pebble retries a
// failed flush at once and without end), and, given room, start on the
// same data with every write it acknowledged.
//
// Before this test, such a node never exited: stopping raft waited for a
// Ready loop stalled inside Pebble, and closing the state store for a
// flush that could not succeed, while Pebble logged every failed retry,
// hundreds of lines a second.
//
// It needs to mount a tmpfs (root, as in CI); elsewhere it is skipped.
func TestRealFullDiskStopsTheNodeAndLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 200 MiB filesystem")
	}
	mnt := mountTmpfs(t, "200m")

	p := kvdproc.Start(t, filepath.Join(mnt, "data"), "--min-free-disk", "0")
	rc := dial(t, p.MemcacheAddr)
	value := strings.Repeat("v", 8192)
	set := func(i int) (string, error) {
		if err := rc.c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
			return "", err
		}
		if _, err := fmt.Fprintf(rc.c, "set k%d 0 0 %d\r\n%s\r\n", i, len(value), value); err != nil {
			return "", err
		}
		l, err := rc.r.ReadString('\n')
		return strings.TrimSpace(l), err
	}
	const before = 2000
	for i := range before {
		reply, err := set(i)
		require.NoError(t, err)
		require.Equal(t, "STORED", reply)
	}
	filler, err := os.Create(filepath.Join(mnt, "filler"))
	require.NoError(t, err)
	chunk := make([]byte, 1<<20)
	for range 256 { // more than the filesystem holds
		if _, err = filler.Write(chunk); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, syscall.ENOSPC, "the filler did not fill the filesystem")
	require.NoError(t, filler.Close())

	acked := before
	last := "STORED"
	for i := before; i < 40_000 && last == "STORED"; i++ {
		reply, err := set(i)
		if last = reply; err != nil {
			last = err.Error()
		} else if reply == "STORED" {
			acked++
		}
	}
	t.Logf("%d writes acknowledged, then %q", acked, last)
	require.NotEqual(t, "STORED", last, "the disk never filled")

	select {
	case <-p.Exited():
		t.Log("kvd stopped by itself")
	default:
		require.NoError(t, syscall.Kill(p.PID(), syscall.SIGTERM))
	}
	select {
	case <-p.Exited():
	case <-time.After(time.Minute):
		t.Fatalf("kvd still runs a minute after it was told to stop on a full disk\n%s", tail(p.Log.String(), 20))
	}
	log := p.Log.String()
	require.NotZero(t, p.ExitCode(), "kvd exited cleanly although it could not write its state\n%s", log)
	require.Contains(t, log, "no space left on device", "the log names the cause")
	require.Less(t, strings.Count(log, "\n"), 100, "the log was flooded\n%s", tail(log, 20))

	// Room again (the restart's raft log starts a new 64 MiB segment, and
	// the store must flush what it replays): every acknowledged write is
	// there, and writes are taken again.
	out, err := exec.Command("mount", "-o", "remount,size=500m", mnt).CombinedOutput()
	require.NoError(t, err, "grow the tmpfs: %s", out)
	q := p.Restart()
	rc = dial(t, q.MemcacheAddr)
	for i := range acked {
		rc.send(fmt.Sprintf("get k%d\r\n", i))
		require.Equal(t, fmt.Sprintf("VALUE k%d 0 %d", i, len(value)), rc.line(), "acknowledged write k%d", i)
		require.Equal(t, value, rc.line())
		require.Equal(t, "END", rc.line())
	}
	rc.send("set after 0 0 1\r\nx\r\n")
	require.Equal(t, "STORED", rc.line(), "the node writes again once there is room")
	q.Stop()
}

// mountTmpfs mounts a tmpfs of size for the test, which is skipped where
// it cannot (mounting needs root, as in CI).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "fs")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
