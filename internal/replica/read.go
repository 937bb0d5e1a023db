package replica

import (
	"encoding/binary"
	"sort"
	"sync"
)

// readBatcher turns many concurrent linearizable reads into one ReadIndex
// request per Ready-loop iteration: readers join the open batch; the loop
// closes it, asks raft for a read index, and releases the whole batch once
// the state machine has applied that index.
type readBatcher struct {
	mu   sync.Mutex
	open []chan error // readers waiting for the next ReadIndex request

	// Owned by the Ready loop goroutine.
	nextID   uint64
	inflight map[uint64][]chan error // request ctx → readers
	ready    []readyBatch            // read index known, waiting for apply
}

type readyBatch struct {
	index   uint64
	readers []chan error
}

func newReadBatcher() *readBatcher {
	return &readBatcher{inflight: make(map[uint64][]chan error)}
}

func (b *readBatcher) join() chan error {
	ch := make(chan error, 1)
	b.mu.Lock()
	b.open = append(b.open, ch)
	b.mu.Unlock()
	return ch
}

// take closes the open batch; it returns the request context for raft, or
// nil when nobody is waiting.
func (b *readBatcher) take() []byte {
	b.mu.Lock()
	readers := b.open
	b.open = nil
	b.mu.Unlock()
	if len(readers) == 0 {
		return nil
	}
	b.nextID++
	b.inflight[b.nextID] = readers
	return binary.BigEndian.AppendUint64(nil, b.nextID)
}

// indexKnown records raft's answer for one request.
func (b *readBatcher) indexKnown(rctx []byte, index uint64) {
	if len(rctx) != 8 {
		return
	}
	id := binary.BigEndian.Uint64(rctx)
	readers, ok := b.inflight[id]
	if !ok {
		return
	}
	delete(b.inflight, id)
	b.ready = append(b.ready, readyBatch{index: index, readers: readers})
	sort.Slice(b.ready, func(i, j int) bool { return b.ready[i].index < b.ready[j].index })
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
	for id, readers := range b.inflight {
		for _, ch := range readers {
			ch <- err
		}
		delete(b.inflight, id)
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
