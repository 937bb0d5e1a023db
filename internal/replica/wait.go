package replica

import (
	"sync"
	"sync/atomic"
)

// Outcome is what a proposal's entry produced once applied, or why it failed.
type Outcome struct {
	Result any
	Err    error
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
	m  map[uint64]chan Outcome
	n  atomic.Int64 // len(m), readable without mu
}

func newWaitRegistry() *waitRegistry {
	return &waitRegistry{m: make(map[uint64]chan Outcome)}
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
	w.m[id] = ch
	w.n.Store(int64(len(w.m)))
	return ch, true
}

// trigger delivers o to id's waiter if one is registered here, and says
// whether one was. Entries proposed on other nodes have no waiter on this
// one.
func (w *waitRegistry) trigger(id uint64, o Outcome) bool {
	w.mu.Lock()
	ch, ok := w.m[id]
	delete(w.m, id)
	w.n.Store(int64(len(w.m)))
	w.mu.Unlock()
	if ok {
		ch <- o
	}
	return ok
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

// failAll ends every waiter with err (node stopping).
func (w *waitRegistry) failAll(err error) {
	w.mu.Lock()
	m := w.m
	w.m = make(map[uint64]chan Outcome)
	w.n.Store(0)
	w.mu.Unlock()
	for _, ch := range m {
		ch <- Outcome{Err: err}
	}
}
