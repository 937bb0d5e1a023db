package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// MemNetwork connects MemTransports in one process, for deterministic tests
// of the replica and of whole clusters. Messages are marshalled on Send and
// unmarshalled on delivery, as over TCP, so sender and receiver never share
// memory. Each (sender, receiver) link is a bounded FIFO queue with one
// delivery goroutine, so messages from one node to another are stepped in
// the order they were sent, one at a time.
//
// Faults: Partition, Cut, SetDrop and SetDelay change what happens to
// messages sent afterwards; a message already queued is also discarded if,
// when its turn comes, its link has been partitioned or cut. A message that
// cannot be delivered because its link is blocked, its destination is not
// registered, or its link queue is full is dropped and the sender's Handler
// gets ReportUnreachable, as it would from TCP when dials fail; so is one
// still queued (or delayed) when its destination closes. Random loss
// (SetDrop) is silent, except that a lost MsgSnap is reported as a failed
// snapshot.
type MemNetwork struct {
	mu        sync.Mutex
	nodes     map[uint64]*MemTransport
	group     map[uint64]int // node → partition group; nil when not partitioned
	cuts      map[[2]uint64]struct{}
	dropP     float64
	rng       *rand.Rand
	delay     time.Duration
	queueSize int
}

// NewMemNetwork returns a network with no faults and link queues of
// DefaultQueueSize messages.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{
		nodes:     make(map[uint64]*MemTransport),
		cuts:      make(map[[2]uint64]struct{}),
		queueSize: DefaultQueueSize,
	}
}

// SetQueueSize sets the bound of link queues created from now on.
func (n *MemNetwork) SetQueueSize(size int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if size <= 0 {
		size = DefaultQueueSize
	}
	n.queueSize = size
}

// Transport registers node id with handler h and returns its endpoint. It
// panics if id already has an open transport (Close the old one first to
// simulate a restart).
func (n *MemNetwork) Transport(id uint64, h Handler) *MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.nodes[id]; old != nil {
		panic(fmt.Sprintf("transport: MemNetwork already has an open transport for node %d", id))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &MemTransport{
		n:      n,
		id:     id,
		h:      h,
		rep:    newReporter(h, minBackoff),
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[uint64]*memLink),
	}
	n.nodes[id] = t
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.rep.run(ctx)
	}()
	return t
}

// Partition splits the nodes into groups; messages cross no group boundary.
// A node named in no group (including one registered later) is isolated.
// It replaces any earlier partition; cuts stay.
func (n *MemNetwork) Partition(groups ...[]uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = make(map[uint64]int)
	for i, g := range groups {
		for _, id := range g {
			n.group[id] = i
		}
	}
}

// Cut blocks messages from one node to another; the reverse direction is
// unaffected.
func (n *MemNetwork) Cut(from, to uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cuts[[2]uint64{from, to}] = struct{}{}
}

// Heal removes the partition and all cuts. Random loss and delay stay (set
// them to zero with SetDrop and SetDelay).
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = nil
	clear(n.cuts)
}

// SetDrop makes each message sent from now on lost with probability p,
// decided by a generator seeded with seed: the same sequence of sends loses
// the same messages. p <= 0 turns loss off.
func (n *MemNetwork) SetDrop(p float64, seed int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropP = p
	n.rng = rand.New(rand.NewPCG(uint64(seed), 0x6b7664))
}

// SetDelay delays the delivery of each message sent from now on by d. Links
// stay FIFO: a message never overtakes one sent before it on the same link.
func (n *MemNetwork) SetDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = max(d, 0)
}

// Close closes every registered transport.
func (n *MemNetwork) Close() {
	n.mu.Lock()
	nodes := make([]*MemTransport, 0, len(n.nodes))
	for _, t := range n.nodes {
		nodes = append(nodes, t)
	}
	n.mu.Unlock()
	for _, t := range nodes {
		t.Close()
	}
}

// allowedLocked reports whether a message may go from one node to another
// under the current partition and cuts.
func (n *MemNetwork) allowedLocked(from, to uint64) bool {
	if _, cut := n.cuts[[2]uint64{from, to}]; cut {
		return false
	}
	if n.group != nil {
		gf, okf := n.group[from]
		gt, okt := n.group[to]
		if !okf || !okt || gf != gt {
			return false
		}
	}
	return true
}

// MemTransport is one node's endpoint on a MemNetwork. Its Send has the
// semantics of TCP.Send: it never blocks, and it drops (reporting the peer
// unreachable) rather than wait.
type MemTransport struct {
	n   *MemNetwork
	id  uint64
	h   Handler
	rep *reporter

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	links  map[uint64]*memLink // by destination ID
	closed bool
}

// memLink is the queue from one transport to one receiver instance.
type memLink struct {
	dst *MemTransport
	q   chan memEnvelope
}

type memEnvelope struct {
	data []byte
	snap bool
	due  time.Time // zero: no delay
}

// Send queues each message on the link to its destination.
func (t *MemTransport) Send(msgs []*pb.Message) {
	for _, m := range msgs {
		t.send(m)
	}
}

func (t *MemTransport) send(m *pb.Message) {
	to, snap := m.GetTo(), m.GetType() == pb.MsgSnap
	n := t.n
	n.mu.Lock()
	dst := n.nodes[to]
	reachable := dst != nil && n.allowedLocked(t.id, to)
	lost := reachable && n.dropP > 0 && n.rng.Float64() < n.dropP
	var due time.Time
	if n.delay > 0 {
		due = time.Now().Add(n.delay)
	}
	n.mu.Unlock()

	switch {
	case t.ctx.Err() != nil:
		return
	case !reachable:
		t.unreachable(to, snap)
		return
	case lost:
		if snap {
			t.rep.snapshot(to, true)
		}
		return
	}
	data, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("transport: cannot marshal %s for node %d: %v", m.GetType(), to, err))
	}
	if !t.enqueue(dst, memEnvelope{data: data, snap: snap, due: due}) && t.ctx.Err() == nil {
		t.unreachable(to, snap)
	}
}

func (t *MemTransport) unreachable(to uint64, snap bool) {
	t.rep.unreachable(to)
	if snap {
		t.rep.snapshot(to, true)
	}
}

// enqueue puts e on the link to dst, starting the link's delivery goroutine
// on first use. It reports false when e was not queued: t is closed, dst
// has closed, or the link is full. It holds t.mu, which deliver takes once
// after dst closes and before it drains the link: so whatever enqueue queued
// is drained and reported by deliver, and what it did not queue is reported
// by the caller.
func (t *MemTransport) enqueue(dst *MemTransport, e memEnvelope) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || dst.ctx.Err() != nil {
		return false
	}
	l := t.links[dst.id]
	if l == nil || l.dst != dst {
		l = t.newLinkLocked(dst)
	}
	select {
	case l.q <- e:
		return true
	default:
		return false
	}
}

// newLinkLocked creates the queue to dst and starts its delivery goroutine.
func (t *MemTransport) newLinkLocked(dst *MemTransport) *memLink {
	// First message to dst, or dst was closed and re-registered: the old
	// link's goroutine exits with the old receiver.
	t.n.mu.Lock()
	size := t.n.queueSize
	t.n.mu.Unlock()
	l := &memLink{dst: dst, q: make(chan memEnvelope, size)}
	t.links[dst.id] = l
	t.wg.Add(1)
	go t.deliver(l)
	return l
}

// deliver steps the link's messages into the receiver in order until either
// end closes. When the receiver closes first, what is still queued is
// reported undelivered: raft waits for ReportSnapshot after a MsgSnap, and
// a MsgSnap lost without one would stall that peer for good.
func (t *MemTransport) deliver(l *memLink) {
	defer t.wg.Done()
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	release := afterFunc(l.dst.ctx, cancel)
	defer release()
	to := l.dst.id
	defer t.drainClosedLink(l)
	var timer *time.Timer
	for {
		var e memEnvelope
		select {
		case <-ctx.Done():
			return
		case e = <-l.q:
		}
		if d := time.Until(e.due); !e.due.IsZero() && d > 0 {
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			select {
			case <-ctx.Done():
				timer.Stop()
				if t.ctx.Err() == nil {
					t.unreachable(to, e.snap)
				}
				return
			case <-timer.C:
			}
		}
		t.n.mu.Lock()
		ok := t.n.nodes[to] == l.dst && t.n.allowedLocked(t.id, to)
		t.n.mu.Unlock()
		if !ok {
			t.unreachable(to, e.snap)
			continue
		}
		m := new(pb.Message)
		if err := proto.Unmarshal(e.data, m); err != nil {
			panic(fmt.Sprintf("transport: cannot unmarshal a message for node %d: %v", to, err))
		}
		err := l.dst.h.Step(ctx, m)
		if e.snap {
			t.rep.snapshot(to, err != nil)
		}
	}
}

// drainClosedLink reports, when l's receiver has closed and t has not,
// every message still queued on l as undelivered. Once it has passed t.mu,
// enqueue sees the receiver closed and queues nothing more on l.
func (t *MemTransport) drainClosedLink(l *memLink) {
	if t.ctx.Err() != nil {
		return // the sender closed: nobody is waiting for reports
	}
	t.mu.Lock()
	if t.links[l.dst.id] == l {
		delete(t.links, l.dst.id)
	}
	t.mu.Unlock()
	for {
		select {
		case e := <-l.q:
			t.unreachable(l.dst.id, e.snap)
		default:
			return
		}
	}
}

// AddPeer does nothing: on a MemNetwork nodes are addressed by ID. It exists
// so that MemTransport and TCP satisfy the same interface.
func (t *MemTransport) AddPeer(id uint64, addr string) {}

// RemovePeer does nothing; see AddPeer.
func (t *MemTransport) RemovePeer(id uint64) {}

// Close unregisters the node, stops its links and waits for its goroutines.
// Messages queued from it are discarded; those queued to it are dropped and
// reported to their senders like any undeliverable message. Later calls do
// nothing.
func (t *MemTransport) Close() error {
	t.mu.Lock()
	already := t.closed
	t.closed = true
	t.mu.Unlock()
	if already {
		return nil
	}
	t.n.mu.Lock()
	if t.n.nodes[t.id] == t {
		delete(t.n.nodes, t.id)
	}
	t.n.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	return nil
}
