package fsm

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
)

// TestCloseOnAFullDiskSkipsTheFlush: once the disk refuses writes, every
// flush fails and Pebble retries it without end, so a flush never
// finishes. Close must not wait for one (the raft log holds what it would
// have written), and the failures, hundreds a second, must not flood the
// log. With space back, the store opens with what it held on disk.
func TestCloseOnAFullDiskSkipsTheFlush(t *testing.T) {
	var full atomic.Bool
	mem := vfs.NewMem()
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	}))
	// slog's handler serialises Pebble's goroutines' writes; the test reads
	// the buffer only after Close, when they have ended.
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	f, err := Open("/state", logger, Options{FS: fs, CacheBytes: 1 << 20, FlushAfterBytes: 2 << 10})
	require.NoError(t, err)
	next := setKeys(t, f, 1, 0, 100, "a")
	flushed := next - 1
	_, err = f.Sync() // starts a flush of the first 100
	require.NoError(t, err)
	require.Equal(t, flushed, syncUntil(t, f, flushed))

	full.Store(true)
	setKeys(t, f, next, 100, 200, "b")
	_, err = f.Sync() // starts a flush that cannot succeed
	require.NoError(t, err)
	failures := func() uint64 {
		f.health.mu.Lock()
		defer f.health.mu.Unlock()
		return f.health.failures
	}
	require.Eventually(t, func() bool { return failures() >= 2 }, 10*time.Second, time.Millisecond,
		"the failing flush was never reported, or never retried")

	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case err = <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waits for a flush that cannot succeed")
	}
	require.ErrorContains(t, err, "flush: skipped")
	require.ErrorIs(t, err, syscall.ENOSPC)
	// Pebble retried the flush until Close, each time failing the same way;
	// the log says so once, then once per logEvery failures.
	n := failures()
	require.Equal(t, 1+int(n/logEvery), strings.Count(log.String(), "background work failed"),
		"%d failures; the log:\n%s", n, log.String())

	full.Store(false)
	g, err := Open("/state", discardLogger(), Options{FS: mem, CacheBytes: 1 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close()) }()
	require.Equal(t, flushed, g.AppliedIndex(), "the store holds what its last good flush wrote; the raft log replays the rest")
}

// TestHealthClearsOnAGoodFlush: a background error wakes whoever waits for
// the next one and marks the store failing until a flush succeeds.
func TestHealthClearsOnAGoodFlush(t *testing.T) {
	h := newStoreHealth(discardLogger())
	require.NoError(t, h.failing())
	wait := h.nextFailure()
	h.backgroundError(syscall.ENOSPC)
	select {
	case <-wait:
	default:
		t.Fatal("a waiter was not told of the failure")
	}
	require.ErrorIs(t, h.failing(), syscall.ENOSPC)
	h.flushEnd(pebble.FlushInfo{Done: true})
	require.NoError(t, h.failing(), "a flush that succeeded clears the failure")
	h.backgroundError(syscall.EIO)
	h.flushEnd(pebble.FlushInfo{Done: true, Err: syscall.EIO})
	require.ErrorIs(t, h.failing(), syscall.EIO, "a failed flush clears nothing")
}
