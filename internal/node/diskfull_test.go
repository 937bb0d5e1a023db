package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// diskFullChild names the data dir when this test binary runs as the child
// process of TestDiskFullStopsTheNodeAndLosesNothing.
const diskFullChild = "KVD_TEST_DISKFULL_DIR"

// diskFullWrites are acknowledged before the disk fills.
const diskFullWrites = 200

// TestDiskFullStopsTheNodeAndLosesNothing fills the disk under a running
// node: from one moment on every write to its data dir fails with ENOSPC, as
// on a full filesystem. A failed write or fsync of the raft log may have
// lost data, so the node must stop (Pebble declares such a commit fatal)
// with an error that names the cause and a non-zero exit, acknowledge
// nothing it could not persist, and, started again on the same data once
// there is space, serve every write it did acknowledge.
//
// The node runs in a child process (this test binary again) on a real
// directory, because stopping means the process ends.
func TestDiskFullStopsTheNodeAndLosesNothing(t *testing.T) {
	if dir := os.Getenv(diskFullChild); dir != "" {
		fillDiskUnderNode(t, dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskFullStopsTheNodeAndLosesNothing$", "-test.count=1")
	cmd.Env = append(os.Environ(), diskFullChild+"="+dir)
	out, err := cmd.CombinedOutput()
	log := string(out)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the node kept running on a full disk:\n%s", log)
	require.NotContains(t, log, "ACKNOWLEDGED", "a write was acknowledged although the disk was full")
	require.Contains(t, log, fmt.Sprintf("%d writes acknowledged", diskFullWrites))
	require.Contains(t, log, "no space left on device", "the fatal error names the cause")
	t.Logf("the node stopped on a full disk (%v); its last words: %s", exit, lastLines(log, "no space left on device"))

	// Space is back: the same data dir opens and holds every acknowledged write.
	s := openStackAt(t, vfs.Default, dir, slog.New(slog.DiscardHandler))
	defer s.close()
	for i := range diskFullWrites {
		key := fmt.Sprintf("k%d", i)
		it, ok, err := s.kv.Get([]byte(key))
		require.NoError(t, err)
		require.True(t, ok, "acknowledged write %s lost", key)
		require.Equal(t, "v-"+key, string(it.Value))
	}
	_, err = s.kv.Do(context.Background(), &command.Command{Op: command.OpSet, Key: []byte("later"), Value: []byte("v")})
	require.NoError(t, err, "the node writes again once there is space")
}

// fillDiskUnderNode is the child: it writes, fills the disk, writes once
// more, and reports on stdout what happened. It is expected to die in the
// second write; should the node instead stop and let it return, it exits
// 1 with the node's error.
func fillDiskUnderNode(t *testing.T, dir string) {
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.HasPrefix(op.Path, dir) {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	}))
	s := openStackAt(t, fs, dir, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	set := func(key string) error {
		_, err := s.kv.Do(context.Background(), &command.Command{Op: command.OpSet, Key: []byte(key), Value: []byte("v-" + key)})
		return err
	}
	for i := range diskFullWrites {
		if err := set(fmt.Sprintf("k%d", i)); err != nil {
			fmt.Printf("write %d before the disk filled failed: %v\n", i, err)
			os.Exit(1)
		}
	}
	fmt.Printf("%d writes acknowledged\n", diskFullWrites)
	full.Store(true)
	if err := set("refused"); err == nil {
		fmt.Println("ACKNOWLEDGED a write on a full disk")
		os.Exit(0)
	}
	select {
	case <-s.rep.Done():
		fmt.Printf("node stopped: %v\n", s.rep.Err())
	case <-time.After(30 * time.Second):
		fmt.Println("the write failed but the node kept running")
	}
	os.Exit(1)
}

// lastLines returns the lines of log that contain substr.
func lastLines(log, substr string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, " | ")
}

func TestRetryBackoff(t *testing.T) {
	tests := []struct {
		failures uint64
		want     time.Duration
	}{
		{0, 0},
		{1, 10 * time.Millisecond},
		{2, 20 * time.Millisecond},
		{5, 160 * time.Millisecond},
		{6, 320 * time.Millisecond},
		{7, maxRetryBackoff},
		{1000, maxRetryBackoff},
		{^uint64(0), maxRetryBackoff},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, retryBackoff(tt.failures), "after %d failures", tt.failures)
	}
}
