package transport

import (
	"context"
	"slices"
	"sync"
	"time"
)

// reporter delivers failure reports to the Handler from one goroutine of its
// own, so that Send (called on the replica's Ready loop) never calls back
// into the replica. Reports are coalesced per peer: the pending set holds at
// most one unreachable and one snapshot report per peer, so it is bounded
// by the number of peers however fast failures happen. Unreachable reports
// for one peer are further rate-limited to one per minInterval.
type reporter struct {
	h           Handler
	minInterval time.Duration

	mu      sync.Mutex
	pending map[uint64]*pendingReport
	last    map[uint64]time.Time // when the last unreachable report was queued
	wake    chan struct{}        // capacity 1
}

type pendingReport struct {
	unreachable bool
	snap        bool // a snapshot report is due
	snapFailed  bool // any snapshot send since the last delivery failed
}

func newReporter(h Handler, minInterval time.Duration) *reporter {
	return &reporter{
		h:           h,
		minInterval: minInterval,
		pending:     make(map[uint64]*pendingReport),
		last:        make(map[uint64]time.Time),
		wake:        make(chan struct{}, 1),
	}
}

func (r *reporter) entry(id uint64) *pendingReport {
	p := r.pending[id]
	if p == nil {
		p = new(pendingReport)
		r.pending[id] = p
	}
	return p
}

func (r *reporter) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// unreachable queues a ReportUnreachable(id) unless one was queued less than
// minInterval ago. It never blocks.
func (r *reporter) unreachable(id uint64) {
	now := time.Now()
	r.mu.Lock()
	if last, ok := r.last[id]; ok && now.Sub(last) < r.minInterval {
		r.mu.Unlock()
		return
	}
	r.last[id] = now
	r.entry(id).unreachable = true
	r.mu.Unlock()
	r.signal()
}

// snapshot queues a ReportSnapshot(id, failed). Reports not yet delivered
// coalesce; a failure is never hidden by a later success.
func (r *reporter) snapshot(id uint64, failed bool) {
	r.mu.Lock()
	p := r.entry(id)
	p.snap = true
	p.snapFailed = p.snapFailed || failed
	r.mu.Unlock()
	r.signal()
}

// forget drops the rate-limit state of a removed peer.
func (r *reporter) forget(id uint64) {
	r.mu.Lock()
	delete(r.last, id)
	r.mu.Unlock()
}

// run delivers reports until ctx is done; undelivered ones are discarded.
func (r *reporter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		batch := r.pending
		r.pending = make(map[uint64]*pendingReport, len(batch))
		r.mu.Unlock()
		ids := make([]uint64, 0, len(batch))
		for id := range batch {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			p := batch[id]
			if p.unreachable {
				r.h.ReportUnreachable(id)
			}
			if p.snap {
				r.h.ReportSnapshot(id, p.snapFailed)
			}
		}
	}
}
