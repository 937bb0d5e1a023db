package memcache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/command"
)

// accessMarks batches this node's reads into OpAccess entries, so that
// meta's h (read since stored) and l (seconds since last access) are
// replicated state, the same on every node, without a log write per read.
//
// A read that finds an item never read since it was stored, or not accessed
// for accessInterval, notes it; the batch is proposed accessDelay later, or
// at once when it is full, or when an mg asks for h or l (Flush), which
// waits for it: a client that reads an item and then asks whether it was
// read hears yes, as from memcached. Reads on other nodes are counted once
// their batch is applied, within accessDelay.
//
// Marks are hints. A batch that cannot be proposed (no quorum, the cluster
// below version 5, too many requests in flight) is dropped, and notes past
// accessMax while a batch is in flight are too: h and l must never cost a
// read its answer, nor grow memory.
type accessMarks struct {
	kv      KV
	mu      sync.Mutex
	pending map[string]command.KeyCAS // key → the version read
	// bytes is the values' size of the pending notes: applying a mark
	// rewrites its item, value and all, so a batch is bounded by it too.
	bytes int
	// waiting is len(pending), and inflight the batches taken and not yet
	// submitted: Send's fast path on every write reads both, and waits
	// for neither when both are 0.
	waiting  atomic.Int32
	inflight atomic.Int32
	timer    *time.Timer
	// sendMu orders proposals; last is the newest proposed, which Flush
	// waits for too: a batch taken by the timer just before a Flush must
	// be applied before the read that follows the Flush.
	sendMu sync.Mutex
	last   <-chan struct{}
}

const (
	// accessDelay is how long a note waits for others to share its entry.
	accessDelay = 10 * time.Millisecond
	// accessMax bounds a batch (and the notes held).
	accessMax = 1024
	// accessMaxBytes bounds the values a batch rewrites when it is applied
	// (what memory one OpAccess entry costs every member).
	accessMaxBytes = 1 << 20
	// accessSubmitWait bounds how long a batch waits for room in the
	// replica's queue, which a writer calling Send may be behind: marks
	// are hints, and a full queue drops them rather than hold writes.
	accessSubmitWait = 50 * time.Millisecond
	// accessInterval: an item read again within it is not noted again
	// (memcached bumps an item's access time at most once a minute too).
	accessInterval = 60 * time.Second
)

func newAccessMarks(svc KV) *accessMarks {
	return &accessMarks{kv: svc}
}

// wants reports whether a read of it at now should be noted.
func wantsAccessMark(it *command.Item, now time.Time) bool {
	if !it.Fetched {
		return true
	}
	at := it.AccessedAt
	if at == 0 {
		at = it.StoredAt
	}
	return now.UnixNano()-at >= int64(accessInterval)
}

// note records a read of key's version it.
func (a *accessMarks) note(key []byte, it *command.Item) {
	if a.kv.ClusterVersion() < command.MinClusterVersion(command.OpAccess) {
		return // nothing would apply it: no lock, no map, per read
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = make(map[string]command.KeyCAS)
	}
	if len(a.pending) >= accessMax || a.bytes >= accessMaxBytes {
		return // dropped: a batch is full and on its way
	}
	if _, ok := a.pending[string(key)]; !ok {
		a.bytes += len(it.Value) + len(key)
	}
	a.pending[string(key)] = command.KeyCAS{CAS: it.CAS, StoredAt: it.StoredAt}
	a.waiting.Store(int32(len(a.pending)))
	if len(a.pending) >= accessMax || a.bytes >= accessMaxBytes {
		go a.flushAsync()
		return
	}
	if a.timer == nil {
		a.timer = time.AfterFunc(accessDelay, a.flushAsync)
	}
}

func (a *accessMarks) flushAsync() {
	a.propose(context.Background())
}

// propose submits the pending notes as one OpAccess entry and returns a
// channel closed once that entry, and so every batch before it, is applied
// (or given up on); nil when nothing was proposed.
func (a *accessMarks) propose(ctx context.Context) <-chan struct{} {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	a.mu.Lock()
	batch := a.pending
	a.pending, a.bytes = nil, 0
	if len(batch) > 0 {
		a.inflight.Add(1) // before waiting drops to 0: Send must see one
	}
	a.waiting.Store(0)
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	defer a.inflight.Add(-1)
	cmd := &command.Command{Op: command.OpAccess, Accessed: make([]command.KeyCAS, 0, len(batch))}
	for k, kc := range batch {
		kc.Key = []byte(k)
		cmd.Accessed = append(cmd.Accessed, kc)
	}
	if a.kv.ClusterVersion() < command.MinClusterVersion(command.OpAccess) {
		return nil // not yet: every member must apply OpAccess first
	}
	sctx, cancel := context.WithTimeout(ctx, accessSubmitWait)
	call, err := a.kv.Submit(sctx, cmd)
	cancel()
	if err != nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = call.Wait(context.Background()) // bounded by the request timeout
	}()
	a.last = done
	return done
}

// Send proposes the pending notes without waiting: a log write submitted
// after it, from the same goroutine, is applied after them. Every write
// calls it first: a write changes its item's CAS, and a note applied after
// it would find another version and mark nothing, where memcached, which
// keeps an incremented or touched item's read mark, says h1.
func (a *accessMarks) Send(ctx context.Context) {
	if a.waiting.Load() == 0 && a.inflight.Load() == 0 {
		return // two atomic loads per write when nothing was noted
	}
	// A batch the timer took may still be on its way to Submit: propose
	// queues behind it (sendMu), and then sends what is pending.
	a.propose(ctx)
}

// Flush proposes the pending notes and waits until they are applied, so a
// read after it sees them. Errors are dropped marks, not failed reads.
func (a *accessMarks) Flush(ctx context.Context) {
	a.propose(ctx)
	a.sendMu.Lock()
	last := a.last
	a.sendMu.Unlock()
	if last == nil {
		return
	}
	select { // applied in log order: every batch before it is too
	case <-last:
	case <-ctx.Done():
	}
}
