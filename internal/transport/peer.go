package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Write batching bounds: the writer drains its queue into one buffer until
// it holds maxWriteBytes, packing frames of up to frameTarget bytes, and
// gives back buffers that grew beyond retainBytes after the write.
const (
	maxWriteBytes = 8 << 20
	frameTarget   = 4 << 20
	retainBytes   = 4 << 20
)

// peerCounters outlive a peer's writer: AddPeer with a new address keeps
// them, RemovePeer drops them. All fields are updated atomically.
type peerCounters struct {
	sent, dropped, received atomic.Uint64
	dials, dialFailures     atomic.Uint64
}

// peer is the outbound half of the link to one member: a bounded queue fed
// by Send and one writer goroutine that owns the connection.
type peer struct {
	t     *TCP
	id    uint64
	addr  string
	queue chan *pb.Message
	probe chan struct{} // Probe: dial if not connected
	c     *peerCounters
	log   *slog.Logger

	ctx    context.Context // cancelled by RemovePeer, AddPeer (new address) or Close
	cancel context.CancelFunc

	connected atomic.Bool
	rtt       atomic.Int64 // nanoseconds, handshake round trip
}

func newPeer(t *TCP, id uint64, addr string, c *peerCounters) *peer {
	ctx, cancel := context.WithCancel(t.ctx)
	return &peer{
		t:      t,
		id:     id,
		addr:   addr,
		queue:  make(chan *pb.Message, t.cfg.QueueSize),
		probe:  make(chan struct{}, 1),
		c:      c,
		log:    t.log.With("peer", id, "addr", addr),
		ctx:    ctx,
		cancel: cancel,
	}
}

// enqueue never blocks: a full queue drops m and reports the peer
// unreachable (rate-limited by the reporter).
func (p *peer) enqueue(m *pb.Message) {
	select {
	case p.queue <- m:
	default:
		p.drop(m)
		p.t.rep.unreachable(p.id)
	}
}

// drop counts a message that will not be sent; a dropped MsgSnap is a failed
// snapshot send as far as raft is concerned.
func (p *peer) drop(m *pb.Message) {
	p.c.dropped.Add(1)
	if m.GetType() == pb.MsgSnap {
		p.t.rep.snapshot(p.id, true)
	}
}

// dropQueued drops what is queued now, without waiting for more.
func (p *peer) dropQueued() {
	for range len(p.queue) {
		select {
		case m := <-p.queue:
			p.drop(m)
		default:
			return
		}
	}
}

// run is the writer goroutine: wait for a message, connect if needed (lazy,
// with backoff after failures), then drain everything queued into one write.
func (p *peer) run() {
	defer p.t.wg.Done()
	w := writer{p: p}
	defer w.disconnect()
	var (
		backoff  time.Duration // next wait before dialling; 0 after a good write
		lastFail time.Time
		batch    []*pb.Message
	)
	fail := func() {
		backoff = nextBackoff(backoff, p.t.cfg.MaxBackoff)
		lastFail = time.Now()
		p.t.rep.unreachable(p.id)
	}
	for {
		var first *pb.Message
		select {
		case <-p.ctx.Done():
			p.dropQueued()
			return
		case <-w.closed: // nil while not connected
			if p.ctx.Err() != nil {
				p.dropQueued() // closed by our own shutdown
				return
			}
			p.log.Info("peer closed our connection; dialling again at the next message")
			// A connection the far side drops at once is a failure like a
			// refused dial, and backs off the next; one that lasted was
			// a peer going away, to be dialled again without delay.
			young := time.Since(w.connectedAt) < p.t.cfg.MaxBackoff
			w.disconnect()
			if young {
				fail()
			}
			continue
		case first = <-p.queue:
		case <-p.probe:
			// Dial only: a failure is not reported unreachable (no
			// message was lost) but backs off the next dial as any does.
			if w.conn == nil && (backoff == 0 || time.Since(lastFail) >= backoff) {
				if err := w.connect(); err != nil {
					if p.ctx.Err() != nil {
						// What was queued during the dial is dropped
						// as on every other way out: a MsgSnap must be
						// reported failed.
						p.dropQueued()
						return
					}
					backoff = nextBackoff(backoff, p.t.cfg.MaxBackoff)
					lastFail = time.Now()
				}
			}
			continue
		}
		if w.conn == nil {
			if backoff > 0 && !p.sleep(jitter(backoff)-time.Since(lastFail)) {
				p.drop(first)
				p.dropQueued()
				return
			}
			if err := w.connect(); err != nil {
				p.drop(first)
				p.dropQueued()
				if p.ctx.Err() != nil {
					return
				}
				fail()
				continue
			}
		}
		batch = w.encode(batch, first)
		if err := w.write(batch); err != nil {
			for _, m := range batch {
				p.drop(m)
			}
			clear(batch)
			if p.ctx.Err() != nil {
				p.dropQueued() // as on every other way out
				return
			}
			fail()
			continue
		}
		clear(batch) // do not pin sent messages until the next batch
		// The backoff ends once the connection has lasted: a write the
		// kernel took proves little on one the far side drops at once (a
		// frame it refuses, another process with the same node ID taking
		// its place), and resetting on it redialled every 25-50 ms for good.
		if time.Since(w.connectedAt) >= p.t.cfg.MaxBackoff {
			backoff = 0
		}
	}
}

// sleep waits d (returning at once if d <= 0); false if the peer stopped.
func (p *peer) sleep(d time.Duration) bool {
	if d <= 0 {
		return p.ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-p.ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

func nextBackoff(d, max time.Duration) time.Duration {
	if d <= 0 {
		return minBackoff
	}
	return min(2*d, max)
}

// jitter picks a delay uniformly in [d/2, d].
func jitter(d time.Duration) time.Duration {
	half := d / 2
	return half + rand.N(half+1)
}

// writer is the connection state owned by the writer goroutine.
type writer struct {
	p        *peer
	conn     net.Conn
	release  func() bool // unregisters the close-on-cancel hook
	enc      frameEncoder
	failText string // failureKey of the last failure logged at warn
	// connectedAt is when the handshake of conn completed.
	connectedAt time.Time
	// closed is closed when the far side closes conn (or it fails): see
	// watch.
	closed chan struct{}
}

// watch reads conn, on which the acceptor sends nothing after the
// handshake, until it fails, then closes closed. A peer that dies or
// restarts closes the connection from its side at once; without a read,
// that would be noticed only at the next write, which fails, and the
// messages in it are lost. A member that sends to a peer rarely (a
// follower to another follower, whose first message after a leader's
// death is its vote) would lose exactly the message that mattered, and
// the election would wait for another timeout.
func watch(conn net.Conn, closed chan struct{}) {
	defer close(closed)
	var buf [64]byte
	for {
		if _, err := conn.Read(buf[:]); err != nil {
			return
		}
	}
}

// refusedError is a handshake the remote side answered with a refusal.
type refusedError struct {
	status    uint16
	clusterID uint64
	id        uint64
	applied   uint64 // with statusNotMember
}

func (e *refusedError) Error() string {
	if e.status == statusNotMember {
		return fmt.Sprintf("peer refused the connection: %s as of its applied index %d (node ID %d)",
			statusText(e.status), e.applied, e.id)
	}
	return fmt.Sprintf("peer refused the connection: %s (its cluster ID %d, node ID %d)",
		statusText(e.status), e.clusterID, e.id)
}

// connect dials and runs the handshake within DialTimeout; Close or
// RemovePeer abort it at once.
func (w *writer) connect() error {
	p, cfg := w.p, &w.p.t.cfg
	p.c.dials.Add(1)
	conn, rtt, err := dialPeer(p.ctx, p.addr, cfg.DialTimeout, hello{
		Version:   ProtocolVersion,
		ClusterID: cfg.ClusterID,
		From:      cfg.LocalID,
		To:        p.id,
	}, p.t.tls)
	if err != nil {
		p.c.dialFailures.Add(1)
		if p.ctx.Err() == nil {
			w.logFailure("cannot connect to peer", err)
			if re := (*refusedError)(nil); errors.As(err, &re) && re.status == statusNotMember && cfg.OnNotMember != nil {
				cfg.OnNotMember(p.id, re.applied)
			}
		}
		return err
	}
	w.conn, w.connectedAt = conn, time.Now()
	w.release = afterFunc(p.ctx, func() { conn.Close() })
	// The watcher gets the channel, not the field: disconnect clears
	// the field while the watcher may not have started yet.
	closed := make(chan struct{})
	w.closed = closed
	p.t.wg.Add(1)
	go func() {
		defer p.t.wg.Done()
		watch(conn, closed)
	}()
	p.connected.Store(true)
	p.rtt.Store(int64(rtt))
	w.failText = ""
	p.log.Info("connected to peer", "rtt", rtt)
	return nil
}

// logFailure logs at warn when the failure differs from the previous one
// (the start of a streak, or a new reason) and at debug otherwise, so a
// peer that stays down costs one warning, not one per backoff step.
func (w *writer) logFailure(msg string, err error) {
	key := failureKey(err)
	if re := (*refusedError)(nil); errors.As(err, &re) {
		msg = "peer refused our connection"
	}
	if key != w.failText {
		w.failText = key
		w.p.log.Warn(msg, "err", err)
		return
	}
	w.p.log.Debug(msg, "err", err)
}

// failureKey names the kind of a failure without the details that change
// from one attempt to the next (such as the local ephemeral port).
func failureKey(err error) string {
	if re := (*refusedError)(nil); errors.As(err, &re) {
		if re.status == statusNotMember {
			// The acceptor's applied index moves between attempts.
			return fmt.Sprintf("%s (node ID %d)", statusText(re.status), re.id)
		}
		return re.Error()
	}
	if oe := (*net.OpError)(nil); errors.As(err, &oe) && oe.Err != nil {
		return oe.Op + ": " + oe.Err.Error()
	}
	return err.Error()
}

func (w *writer) disconnect() {
	if w.conn == nil {
		return
	}
	w.release()
	w.conn.Close()
	w.conn, w.closed = nil, nil
	w.p.connected.Store(false)
}

// encode starts a new batch with first and adds whatever is queued now, until
// the encoding reaches maxWriteBytes (the rest waits for the next write). A
// message too large for a frame is dropped on its own, logged at error:
// raft is configured to keep messages far below MaxFrameSize.
func (w *writer) encode(batch []*pb.Message, first *pb.Message) []*pb.Message {
	w.enc.reset(frameTarget)
	batch = w.add(batch[:0], first)
	for range len(w.p.queue) {
		if len(w.enc.buf) >= maxWriteBytes {
			break
		}
		select {
		case m := <-w.p.queue:
			batch = w.add(batch, m)
		default:
			return batch
		}
	}
	return batch
}

func (w *writer) add(batch []*pb.Message, m *pb.Message) []*pb.Message {
	if err := w.enc.add(m); err != nil {
		w.p.log.Error("dropping unsendable message", "type", m.GetType(), "err", err)
		w.p.drop(m)
		return batch
	}
	return append(batch, m)
}

// write sends the encoded batch with one Write call. A failed write closes
// the connection; the caller drops the batch.
func (w *writer) write(batch []*pb.Message) error {
	p := w.p
	buf := w.enc.bytes()
	defer func() {
		if cap(w.enc.buf) > retainBytes {
			w.enc.buf = nil
		}
	}()
	if len(batch) == 0 {
		return nil
	}
	w.conn.SetWriteDeadline(time.Now().Add(p.t.cfg.WriteTimeout))
	if _, err := w.conn.Write(buf); err != nil {
		if p.ctx.Err() == nil {
			w.logFailure("lost connection to peer", err)
		}
		w.disconnect()
		return err
	}
	p.c.sent.Add(uint64(len(batch)))
	for _, m := range batch {
		// MsgSnap carries only metadata in kvd (see the package doc): the
		// send attempt is the whole transfer as far as this layer knows.
		if m.GetType() == pb.MsgSnap {
			p.t.rep.snapshot(p.id, false)
		}
	}
	return nil
}

// dialPeer connects to addr and runs the dialer's half of the handshake:
// with sec (peer TLS) set, the TLS handshake first and, once the peer has
// accepted the hello, the check that its certificate names the member h.To.
// All of it fits in timeout. It returns the connection with no deadline set
// and the hello's round trip time.
func dialPeer(ctx context.Context, addr string, timeout time.Duration, h hello, sec *peerTLS) (net.Conn, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	release := afterFunc(ctx, func() { raw.Close() })
	if dl, ok := ctx.Deadline(); ok {
		raw.SetDeadline(dl)
	}
	conn := raw
	var tc *tls.Conn
	if sec != nil {
		if tc, err = sec.clientHandshake(raw); err == nil {
			conn = tlsConn{tc}
		}
	}
	start := time.Now()
	var resp response
	if err == nil {
		if _, err = conn.Write(h.marshal()); err == nil {
			resp, err = readResponse(conn)
		}
	}
	rtt := time.Since(start)
	if release() && err == nil {
		err = fmt.Errorf("handshake: %w", context.Cause(ctx))
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("handshake with %s: %w", addr, ctx.Err())
		}
		return nil, 0, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	if resp.Status != statusOK {
		conn.Close()
		return nil, 0, &refusedError{status: resp.Status, clusterID: resp.ClusterID, id: resp.ID, applied: resp.Applied}
	}
	if tc != nil {
		// The peer answered for h.To; its certificate must say the same,
		// or another member (or a stolen certificate of one) stands at
		// that address.
		if err := sec.checkMember(tc.ConnectionState(), h.To); err != nil {
			conn.Close()
			return nil, 0, fmt.Errorf("peer at %s: %w", addr, err)
		}
	}
	conn.SetDeadline(time.Time{})
	return conn, rtt, nil
}
