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
	// waiting is len(pending), for Send's fast path on every write.
	waiting atomic.Int32
	timer   *time.Timer
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
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = make(map[string]command.KeyCAS)
	}
	if len(a.pending) >= accessMax {
		return // dropped: a batch is full and on its way
	}
	a.pending[string(key)] = command.KeyCAS{CAS: it.CAS, StoredAt: it.StoredAt}
	a.waiting.Store(int32(len(a.pending)))
	if len(a.pending) >= accessMax {
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
	a.pending = nil
	a.waiting.Store(0)
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	cmd := &command.Command{Op: command.OpAccess, Accessed: make([]command.KeyCAS, 0, len(batch))}
	for k, kc := range batch {
		kc.Key = []byte(k)
		cmd.Accessed = append(cmd.Accessed, kc)
	}
	call, err := a.kv.Submit(ctx, cmd)
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
	if a.waiting.Load() == 0 {
		return // one atomic load per write when nothing was noted
	}
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
