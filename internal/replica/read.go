package replica

import (
	"encoding/binary"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// readBatcher turns many concurrent linearizable reads into few ReadIndex
// rounds: readers join the open batch; the loop closes it when no earlier
// round is in flight (roundInFlight), asks raft for a read index, and
// releases the whole batch once the state machine has applied that index.
type readBatcher struct {
	mu   sync.Mutex
	open []chan error // readers waiting for the next ReadIndex request

	// Owned by the Ready loop goroutine.
	nextID   uint64
	inflight map[uint64]inflightRead // request ctx → readers
	ready    []readyBatch            // read index known, waiting for apply
}

// inflightRead is one ReadIndex request raft has not answered yet. Its send
// time and term let an answer on the leader extend the read lease.
type inflightRead struct {
	readers []chan error
	sentAt  time.Time
	term    uint64
}

type readyBatch struct {
	index   uint64
	readers []chan error
}

// newReadBatcher numbers requests from a random point: an answer reaches
// whichever process of this member is listening when it arrives (the
// leader's peer queue delivers what it held once a restarted member
// reconnects), and with every process counting from 1 the answer to the
// previous process's request n released the new one's readers of request n
// at an index confirmed before they came.
func newReadBatcher() *readBatcher {
	return &readBatcher{inflight: make(map[uint64]inflightRead), nextID: rand.Uint64()}
}

func (b *readBatcher) join() chan error {
	ch := make(chan error, 1)
	b.mu.Lock()
	b.open = append(b.open, ch)
	b.mu.Unlock()
	return ch
}

// take closes the open batch and returns its readers (none when nobody is
// waiting).
func (b *readBatcher) take() []chan error {
	b.mu.Lock()
	readers := b.open
	b.open = nil
	b.mu.Unlock()
	return readers
}

// roundInFlight reports whether a ReadIndex round that carries readers is
// still waiting for raft's answer; the open batch then waits for it, as
// etcd's read loop does. Each round costs every member a heartbeat exchange
// (a follower's also a request to the leader and its answer), so a round per
// Ready-loop iteration spent most of a cluster's CPU on rounds of a handful
// of readers each. With one round in flight, each carries every reader that
// came during the last: the rounds per second stay near one per round trip
// however many readers there are, and a lone reader never waits for another.
// A round unanswered after retryAfter (its request or answer lost on the
// way) holds the next one back no longer: its readers are told to retry.
func (b *readBatcher) roundInFlight(now time.Time, retryAfter time.Duration) bool {
	busy := false
	for id, req := range b.inflight {
		if len(req.readers) == 0 {
			continue // a lease renewal: nobody waits for it
		}
		if now.Sub(req.sentAt) < retryAfter {
			busy = true
			continue
		}
		b.drop(id, errReadRetry)
	}
	return busy
}

// drop ends request id, telling its readers err.
func (b *readBatcher) drop(id uint64, err error) {
	for _, ch := range b.inflight[id].readers {
		ch <- err
	}
	delete(b.inflight, id)
}

// request registers a ReadIndex request for readers (none for a lease
// renewal) and returns its context for raft.
func (b *readBatcher) request(readers []chan error, sentAt time.Time, term uint64) []byte {
	b.nextID++
	b.inflight[b.nextID] = inflightRead{readers: readers, sentAt: sentAt, term: term}
	return binary.BigEndian.AppendUint64(nil, b.nextID)
}

// serveAt releases readers once index is applied, with no request to raft:
// the leader's lease vouches for index.
func (b *readBatcher) serveAt(index uint64, readers []chan error) {
	b.add(readyBatch{index: index, readers: readers})
}

func (b *readBatcher) add(rb readyBatch) {
	b.ready = append(b.ready, rb)
	sort.Slice(b.ready, func(i, j int) bool { return b.ready[i].index < b.ready[j].index })
}

// indexKnown records raft's answer for one request and returns the request.
func (b *readBatcher) indexKnown(rctx []byte, index uint64) (inflightRead, bool) {
	if len(rctx) != 8 {
		return inflightRead{}, false
	}
	id := binary.BigEndian.Uint64(rctx)
	req, ok := b.inflight[id]
	if !ok {
		return inflightRead{}, false
	}
	delete(b.inflight, id)
	if len(req.readers) > 0 {
		b.add(readyBatch{index: index, readers: req.readers})
	}
	return req, true
}

// applied releases every batch whose read index is at or below applied.
func (b *readBatcher) applied(applied uint64) {
	n := 0
	for n < len(b.ready) && b.ready[n].index <= applied {
		for _, ch := range b.ready[n].readers {
			ch <- nil
		}
		n++
	}
	b.ready = b.ready[n:]
}

// failInflight ends requests raft may have dropped (leader change): their
// readers retry with a fresh request. Batches whose index is known stay.
func (b *readBatcher) failInflight(err error) {
	for id := range b.inflight {
		b.drop(id, err)
	}
}

func (b *readBatcher) failAll(err error) {
	b.failInflight(err)
	for _, rb := range b.ready {
		for _, ch := range rb.readers {
			ch <- err
		}
	}
	b.ready = nil
	b.mu.Lock()
	open := b.open
	b.open = nil
	b.mu.Unlock()
	for _, ch := range open {
		ch <- err
	}
}
