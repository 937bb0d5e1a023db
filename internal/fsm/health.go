package fsm

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// storeHealth watches the state store's background work (flushes and
// compactions) through Pebble's event listener, from Pebble's goroutines.
//
// Pebble retries a failed flush at once and without end: on a full disk
// it failed hundreds of times a second (pacedFS now spaces the attempts
// out), and logged every failure. A flush
// that cannot succeed also never ends a wait for it, so Close, which
// flushes so that a clean restart has nothing to replay, must not wait
// for one while the disk refuses them: it would hold the process up
// forever after the node has already stopped on the same disk's error.
// The raft log holds every entry a flush has not written (the log is
// never compacted past what a flush made durable), so skipping the flush
// loses nothing; the next start replays those entries.
type storeHealth struct {
	logger *slog.Logger

	mu       sync.Mutex
	failures uint64 // background errors since the last flush that succeeded
	paused   uint64 // the failure count pacedFS last paused for
	last     error
	// flushErr is the last flush's error, nil once a flush succeeds. Only
	// it keeps flush from starting one: a compaction or a disk-usage check
	// that failed once says nothing about the next flush, and skipping
	// flushes until one succeeded left a quiet node unable to take a
	// snapshot for hours.
	flushErr error
	next     chan struct{} // closed at the next background error; nil if none waits
}

// emptyTable is Pebble's FlushEnd error for a flush that wrote no table:
// not a failure.
const emptyTable = "pebble: empty table"

// logEvery is how often, in failures, a run of background errors is
// logged again after its first: each attempt fails the same way.
const logEvery = 1000

func newStoreHealth(logger *slog.Logger) *storeHealth {
	return &storeHealth{logger: logger}
}

// listen adds the health hooks to Pebble's event listener; Pebble's own
// logging of background errors is replaced by backgroundError's.
func (h *storeHealth) listen(el *pebble.EventListener) {
	el.BackgroundError = h.backgroundError
	el.FlushEnd = h.flushEnd
}

func (h *storeHealth) backgroundError(err error) {
	h.mu.Lock()
	h.failures++
	h.last = err
	n := h.failures
	if h.next != nil {
		close(h.next)
		h.next = nil
	}
	h.mu.Unlock()
	if n == 1 || n%logEvery == 0 {
		h.logger.Error("state store background work failed; Pebble retries it", "err", err.Error(), "failures", n, "component", "pebble")
	}
}

func (h *storeHealth) flushEnd(info pebble.FlushInfo) {
	if info.Err != nil {
		if info.Err.Error() != emptyTable {
			h.mu.Lock()
			h.flushErr = info.Err
			h.mu.Unlock()
		}
		return
	}
	h.mu.Lock()
	n := h.failures
	h.failures, h.paused, h.last, h.flushErr = 0, 0, nil, nil
	h.mu.Unlock()
	if n > 0 {
		h.logger.Info("state store flushes succeed again", "failures_before", n, "component", "pebble")
	}
}

// failing returns the last background error if no flush has succeeded
// since, else nil.
func (h *storeHealth) failing() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// flushFailing returns the last flush's error if no flush has succeeded
// since, else nil.
func (h *storeHealth) flushFailing() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.flushErr
}

// pauseDue tells pacedFS whether to pause before a flush or compaction
// creates a file, and the failures since the last flush that succeeded:
// once per failure, so that the attempt after it pauses at its first file
// only. An attempt writes several files, and pausing at each made a flush
// on a disk with space again take half a second per file.
func (h *storeHealth) pauseDue() (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failures == 0 || h.failures == h.paused {
		return 0, false
	}
	h.paused = h.failures
	return h.failures, true
}

// nextFailure returns a channel closed at the next background error.
func (h *storeHealth) nextFailure() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.next == nil {
		h.next = make(chan struct{})
	}
	return h.next
}

// flush writes db's memtables out and waits for it, unless flushes are
// failing or its background work fails meanwhile: that flush might never
// finish.
func flush(db *pebble.DB, h *storeHealth) error {
	if err := h.flushFailing(); err != nil {
		return fmt.Errorf("skipped, the store's background work is failing: %w", err)
	}
	failed := h.nextFailure()
	done, err := db.AsyncFlush()
	if err != nil {
		return err
	}
	for {
		select {
		case <-done:
			return nil
		case <-failed:
			if err := h.failing(); err != nil {
				return fmt.Errorf("given up, the store's background work failed: %w", err)
			}
			// A flush succeeded since: keep waiting.
			failed = h.nextFailure()
		}
	}
}
