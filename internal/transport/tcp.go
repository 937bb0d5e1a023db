package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// maxInbound bounds the accepted connections alive at once (handshaking or
// established). Established ones are at most one per sender ID: a sender
// that reconnects replaces its previous connection.
const maxInbound = 256

// TCP is the production transport: one outbound connection per peer, and
// inbound connections accepted on ListenAddr. See the package documentation
// for the goroutines and the wire format.
type TCP struct {
	cfg Config
	h   Handler
	log *slog.Logger
	ln  net.Listener
	rep *reporter
	// snap streams snapshots; nil unless Config.Snapshots is set.
	snap *snapshotter
	// tls is nil for plaintext peers; refusals rate-limits the warnings
	// about inbound connections it refuses, tlsRefused counts them.
	tls        *peerTLS
	refusals   *logLimiter
	tlsRefused atomic.Uint64

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.RWMutex
	peers    map[uint64]*peer
	counters map[uint64]*peerCounters
	inbound  map[uint64]net.Conn // established inbound connection per sender
	started  bool
	closed   bool

	inboundSlots   chan struct{}
	unknownDropped atomic.Uint64
	closeOnce      sync.Once
	closeErr       error
}

// NewTCP validates cfg, applies defaults and binds the listener; nothing is
// accepted or dialled until Start. logger may be nil.
func NewTCP(cfg Config, h Handler, logger *slog.Logger) (*TCP, error) {
	if h == nil {
		return nil, errors.New("transport: nil Handler")
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("transport: invalid config: %w", err)
	}
	cfg.setDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on %s: %w", cfg.ListenAddr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &TCP{
		cfg:          cfg,
		h:            h,
		log:          logger.With("component", "transport", "local", cfg.LocalID),
		ln:           ln,
		rep:          newReporter(h, minBackoff),
		ctx:          ctx,
		cancel:       cancel,
		peers:        make(map[uint64]*peer),
		counters:     make(map[uint64]*peerCounters),
		inbound:      make(map[uint64]net.Conn),
		inboundSlots: make(chan struct{}, maxInbound),
		tls:          newPeerTLS(cfg.TLS, cfg.IDOf),
		refusals:     newLogLimiter(refusalLogInterval),
	}
	if cfg.Snapshots != nil {
		if t.snap, err = newSnapshotter(t, cfg.Snapshots, cfg.SnapshotDir); err != nil {
			cancel()
			ln.Close()
			return nil, fmt.Errorf("transport: snapshot staging: %w", err)
		}
	}
	t.cfg.Peers = nil // the live set is t.peers
	for id, addr := range cfg.Peers {
		t.addPeerLocked(id, addr)
	}
	return t, nil
}

// Addr is the bound listen address (host:port).
func (t *TCP) Addr() string { return t.ln.Addr().String() }

// Start runs the accept loop, the reporter and one writer per peer. Calling
// it again, or after Close, does nothing.
func (t *TCP) Start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started || t.closed {
		return
	}
	t.started = true
	t.wg.Add(2)
	go t.acceptLoop()
	go func() {
		defer t.wg.Done()
		t.rep.run(t.ctx)
	}()
	for _, p := range t.peers {
		t.wg.Add(1)
		go p.run()
	}
}

// Send routes each message to its peer's queue and returns without waiting
// for the network. A message for an unknown peer, a full queue or a closed
// transport is dropped; for the first two the peer is reported unreachable
// (asynchronously, never from inside Send). Send is safe for concurrent use
// and the caller must not modify the messages afterwards.
func (t *TCP) Send(msgs []*pb.Message) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, m := range msgs {
		to := m.GetTo()
		if p := t.peers[to]; p != nil && !t.closed {
			if m.GetType() == pb.MsgSnap && t.snap != nil {
				t.snap.send(p, m)
				continue
			}
			p.enqueue(m)
			continue
		}
		t.unknownDropped.Add(1)
		if t.closed || to == t.cfg.LocalID {
			continue // raft never sends to itself through Ready.Messages
		}
		t.log.Debug("dropping message for unknown peer", "to", to, "type", m.GetType())
		t.rep.unreachable(to)
		if m.GetType() == pb.MsgSnap {
			t.rep.snapshot(to, true)
		}
	}
}

// Connected reports whether the outbound connection to peer id is up. A
// peer that dies or is cut off loses it at the first write that fails,
// within a heartbeat of the leader; one never dialled yet, or not known,
// is not connected.
func (t *TCP) Connected(id uint64) bool {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	return p != nil && p.connected.Load()
}

// Probe makes every peer not connected dial once, with no message to send,
// unless it is backing off after a failure. A member that has nothing to
// send (a learner never campaigns) otherwise never dials, and a leader that
// no longer counts it as a member refuses it only at a handshake
// (Config.NotMember, OnNotMember). It returns at once.
func (t *TCP) Probe() {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if !t.started {
		return
	}
	for _, p := range t.peers {
		select {
		case p.probe <- struct{}{}:
		default:
		}
	}
}

// AddPeer adds a peer, or changes the address of a known one (its
// connection is replaced and whatever was queued for the old address is
// dropped). Adding the local ID or ID 0 is ignored.
func (t *TCP) AddPeer(id uint64, addr string) {
	if id == 0 || id == t.cfg.LocalID {
		t.log.Warn("ignoring AddPeer for an invalid or local ID", "peer", id, "addr", addr)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if p := t.peers[id]; p != nil {
		if p.addr == addr {
			return
		}
		p.cancel()
		t.log.Info("peer address changed", "peer", id, "old", p.addr, "addr", addr)
	}
	p := t.addPeerLocked(id, addr)
	if t.started {
		t.wg.Add(1)
		go p.run()
	}
}

func (t *TCP) addPeerLocked(id uint64, addr string) *peer {
	c := t.counters[id]
	if c == nil {
		c = new(peerCounters)
		t.counters[id] = c
	}
	p := newPeer(t, id, addr, c)
	t.peers[id] = p
	return p
}

// RemovePeer stops sending to id: its queue is dropped and its connection
// closed. Messages for id are dropped from now on. Unknown IDs are ignored.
// An inbound connection from id is left alone: raft ignores a removed
// member's messages, and it may still need to learn it was removed.
func (t *TCP) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	delete(t.counters, id)
	t.mu.Unlock()
	if p != nil {
		p.cancel()
		t.rep.forget(id)
	}
}

// Close stops accepting, closes every connection, drops everything queued and
// waits for all goroutines of the transport to exit. It does not wait for
// dial or write timeouts. Later calls return the first result.
func (t *TCP) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		t.cancel()
		if err := t.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.closeErr = err
		}
		t.wg.Wait()
	})
	return t.closeErr
}

// acceptLoop accepts until the listener closes. Temporary failures (such as
// running out of file descriptors) are retried with backoff.
func (t *TCP) acceptLoop() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = nextBackoff(delay, t.cfg.MaxBackoff)
			t.log.Warn("accept failed", "err", err, "retry_in", delay)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		select {
		case t.inboundSlots <- struct{}{}:
		default:
			t.log.Warn("refusing peer connection: too many inbound connections",
				"remote", conn.RemoteAddr().String(), "limit", maxInbound)
			conn.Close()
			continue
		}
		t.wg.Add(1)
		go t.serveInbound(conn)
	}
}
