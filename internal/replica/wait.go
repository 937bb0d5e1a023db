package replica

import (
	"sync"
	"sync/atomic"

	"github.com/kvd-project/kvd/internal/command"
)

// Outcome is what a proposal's entry produced once applied, or why it failed.
type Outcome struct {
	// Result is what applying a proposal's entry produced.
	Result command.Result
	// Index is a configuration change's entry index (ChangeMember).
	Index uint64
	Err   error
}

// waitRegistry correlates proposals with their applied results by request ID.
// Every path that ends a proposal (applied, dropped, timed out, node stopped)
// triggers or cancels its waiter, so nothing leaks.
//
// Its size is the replica's count of proposals in flight (MaxPending): a
// proposal counts from register until its outcome is delivered or its
// waiter gives up, whether or not anyone ever reads the outcome.
type waitRegistry struct {
	mu sync.Mutex
	m  map[uint64]waiter
	n  atomic.Int64 // len(m), readable without mu
}

type waiter struct {
	ch chan Outcome
	// proposed: raft took the proposal, so another member may commit it
	// even if this one stops before it is applied here.
	proposed bool
}

func newWaitRegistry() *waitRegistry {
	return &waitRegistry{m: make(map[uint64]waiter)}
}

// register returns the channel that receives id's outcome, or false if id is
// already waiting (request IDs are unique; a duplicate is a caller bug).
func (w *waitRegistry) register(id uint64) (chan Outcome, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.m[id]; dup {
		return nil, false
	}
	ch := make(chan Outcome, 1)
	w.m[id] = waiter{ch: ch}
	w.n.Store(int64(len(w.m)))
	return ch, true
}

// trigger delivers o to id's waiter if one is registered here, and says
// whether one was. Entries proposed on other nodes have no waiter on this
// one.
func (w *waitRegistry) trigger(id uint64, o Outcome) bool {
	w.mu.Lock()
	x, ok := w.m[id]
	delete(w.m, id)
	w.n.Store(int64(len(w.m)))
	w.mu.Unlock()
	if ok {
		x.ch <- o
	}
	return ok
}

// markProposed records that raft took these proposals (stop).
func (w *waitRegistry) markProposed(props []proposal) {
	w.mu.Lock()
	for _, p := range props {
		if x, ok := w.m[p.reqID]; ok {
			x.proposed = true
			w.m[p.reqID] = x
		}
	}
	w.mu.Unlock()
}

// failProposed ends with err the waiters whose proposals raft took, and
// leaves those still queued for it (a snapshot install).
func (w *waitRegistry) failProposed(err error) {
	w.stop(nil, err)
}

func (w *waitRegistry) cancel(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.n.Store(int64(len(w.m)))
	w.mu.Unlock()
}

// size is how many waiters are registered, read without the lock: it is
// checked on every proposal.
func (w *waitRegistry) size() int { return int(w.n.Load()) }

// failAll ends every waiter with err.
func (w *waitRegistry) failAll(err error) {
	w.stop(err, err)
}

// stop ends every waiter as the node stops: with proposedErr those raft
// took, whose entries may still commit on the other members (a leader sends
// its appends before its own fsync, so even a failed fsync does not stop
// them), and with err the rest, which were never proposed; a nil err leaves
// those waiting.
func (w *waitRegistry) stop(err, proposedErr error) {
	w.mu.Lock()
	var ended []waiter
	for id, x := range w.m {
		if x.proposed || err != nil {
			ended = append(ended, x)
			delete(w.m, id)
		}
	}
	w.n.Store(int64(len(w.m)))
	w.mu.Unlock()
	for _, x := range ended {
		if x.proposed {
			x.ch <- Outcome{Err: proposedErr}
		} else {
			x.ch <- Outcome{Err: err}
		}
	}
}
