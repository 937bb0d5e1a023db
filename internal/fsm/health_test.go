package fsm

import (
	"bytes"
	"errors"
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

// fillable wraps fs so that every write fails with ENOSPC while full is
// set: a disk that fills up and frees again.
func fillable(fs vfs.FS, full *atomic.Bool) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	}))
}

// TestCloseOnAFullDiskSkipsTheFlush: once the disk refuses writes, every
// flush fails and Pebble retries it without end, so a flush never
// finishes. Close must not wait for one (the raft log holds what it would
// have written), and the failures, hundreds a second, must not flood the
// log. With space back, the store opens with what it held on disk.
func TestCloseOnAFullDiskSkipsTheFlush(t *testing.T) {
	var full atomic.Bool
	mem := vfs.NewMem()
	fs := fillable(mem, &full)
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

// TestFailingFlushRetriesArePaced: while the disk refuses writes, each
// retry of the failing flush first waits for RetryPause, with the count of
// failures so far; once a flush succeeds nothing waits any more. The
// pause here blocks until the test lets it go, so the test steps Pebble's
// retry loop one attempt at a time.
func TestFailingFlushRetriesArePaced(t *testing.T) {
	var full atomic.Bool
	mem := vfs.NewMem()
	fs := fillable(mem, &full)
	paused := make(chan uint64)
	release := make(chan struct{})
	stop := make(chan struct{}) // closed at the end: no pause waits then
	pause := func(n uint64) {
		select {
		case paused <- n:
		case <-stop:
			return
		}
		select {
		case <-release:
		case <-stop:
		}
	}
	f, err := Open("/state", discardLogger(), Options{FS: fs, CacheBytes: 1 << 20, FlushAfterBytes: 2 << 10, RetryPause: pause})
	require.NoError(t, err)
	defer func() {
		close(stop)
		require.NoError(t, f.Close())
	}()
	// Healthy: a flush creates its files without a pause (a pause would
	// block this flush, and syncUntil would time out).
	next := setKeys(t, f, 1, 0, 100, "a")
	_, err = f.Sync()
	require.NoError(t, err)
	require.Equal(t, next-1, syncUntil(t, f, next-1))

	full.Store(true)
	next = setKeys(t, f, next, 100, 200, "b")
	_, err = f.Sync() // a flush that fails, and is retried
	require.NoError(t, err)
	receive := func() uint64 {
		select {
		case n := <-paused:
			return n
		case <-time.After(30 * time.Second):
			t.Fatal("the failing flush was never retried")
			return 0
		}
	}
	first := receive()
	require.Positive(t, first, "paused before any failure")
	// The next attempt fails too, and its retry pauses with a higher count
	// (a compaction's attempt may pause in between with the same count).
	for n := first; n == first; {
		release <- struct{}{}
		n = receive()
		require.GreaterOrEqual(t, n, first)
	}

	// Space back: the retry released now succeeds, and with it the store is
	// healthy again; its next flush does not pause.
	full.Store(false)
	release <- struct{}{}
	require.Equal(t, next-1, syncUntil(t, f, next-1), "the retried flush did not make the writes durable")
	require.NoError(t, f.health.failing())
	next = setKeys(t, f, next, 200, 300, "c")
	_, err = f.Sync()
	require.NoError(t, err)
	require.Equal(t, next-1, syncUntil(t, f, next-1))
}

// TestPauseDueOncePerFailure: pacedFS pauses at the first file an attempt
// creates after each failure, never while nothing fails, and starts over
// after a flush that succeeded.
func TestPauseDueOncePerFailure(t *testing.T) {
	h := newStoreHealth(discardLogger())
	_, ok := h.pauseDue()
	require.False(t, ok, "nothing failed")
	h.backgroundError(syscall.ENOSPC)
	n, ok := h.pauseDue()
	require.True(t, ok)
	require.Equal(t, uint64(1), n)
	_, ok = h.pauseDue()
	require.False(t, ok, "the same attempt's next file")
	h.backgroundError(syscall.ENOSPC)
	n, ok = h.pauseDue()
	require.True(t, ok)
	require.Equal(t, uint64(2), n)
	h.flushEnd(pebble.FlushInfo{Done: true})
	_, ok = h.pauseDue()
	require.False(t, ok, "a good flush ends the pauses")
	h.backgroundError(syscall.ENOSPC)
	n, ok = h.pauseDue()
	require.True(t, ok, "a new run of failures pauses again")
	require.Equal(t, uint64(1), n)
}

// TestStaleBackgroundErrorKeepsFlushing: any background error (a failed
// compaction, a failed disk-usage check) marked the store failing until a
// flush succeeded, and while it was, every flush was skipped: no snapshot
// could be taken for a follower or a new member, and Close kept its
// memtable unflushed. On a quiet node the next flush may be hours away.
// Only a failing flush is a reason not to start one.
func TestStaleBackgroundErrorKeepsFlushing(t *testing.T) {
	h := newStoreHealth(discardLogger())
	h.backgroundError(syscall.EIO) // a compaction, say
	require.ErrorIs(t, h.failing(), syscall.EIO, "a waiting flush still gives up at any failure")
	require.NoError(t, h.flushFailing(), "no flush has failed")
	h.flushEnd(pebble.FlushInfo{Done: true, Err: errors.New("pebble: empty table")})
	require.NoError(t, h.flushFailing(), "a flush that wrote no table has not failed")
	h.flushEnd(pebble.FlushInfo{Done: true, Err: syscall.ENOSPC})
	require.ErrorIs(t, h.flushFailing(), syscall.ENOSPC)
	h.flushEnd(pebble.FlushInfo{Done: true})
	require.NoError(t, h.flushFailing())
	require.NoError(t, h.failing())

	// A store whose compaction failed once still takes checkpoints.
	f, err := Open("/state", discardLogger(), Options{FS: vfs.NewMem(), CacheBytes: 1 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	setKeys(t, f, 1, 0, 10, "a")
	f.health.backgroundError(syscall.EIO)
	applied, err := f.Checkpoint("/ck")
	require.NoError(t, err)
	require.Equal(t, f.AppliedIndex(), applied)
}
