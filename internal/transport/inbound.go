package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// readBufferSize is the bufio buffer of an inbound connection; frame bodies
// get their own buffer, reused across frames up to retainBytes.
const readBufferSize = 64 << 10

// serveInbound runs one accepted connection: handshake, then frames until
// the connection fails, breaks the protocol, or the transport closes. It is
// the only goroutine that reads conn and it delivers to Handler.Step in
// arrival order.
func (t *TCP) serveInbound(conn net.Conn) {
	defer t.wg.Done()
	defer func() { <-t.inboundSlots }()
	release := afterFunc(t.ctx, func() { conn.Close() })
	defer release()
	defer conn.Close()
	remote := conn.RemoteAddr().String()

	// pc is the peer connection: conn itself, or TLS over it. (The hooks
	// above close conn; with TLS that is what tlsConn.Close does too.)
	pc := conn
	var state *tls.ConnectionState
	if t.tls != nil {
		tc, err := t.tlsHandshake(conn)
		if err != nil {
			if t.ctx.Err() == nil {
				t.logRefusal(remote, err)
			}
			return
		}
		pc = tlsConn{tc}
		st := tc.ConnectionState()
		state = &st
	}

	h, err := t.acceptHandshake(pc, state)
	if err != nil {
		var me *memberError
		switch {
		case t.ctx.Err() != nil:
		case errors.As(err, &me), errors.Is(err, errUnvouched):
			t.logRefusal(remote, err)
		case errors.Is(err, errNotMember):
			// A removed member redials after every backoff until it
			// learns why; one line per attempt would flood the log.
			t.log.Debug("refused peer connection", "remote", remote, "err", err)
		default:
			t.log.Warn("refused peer connection", "remote", remote, "err", err)
		}
		return
	}
	from := h.From
	log := t.log.With("peer", from, "remote", remote)
	if h.Flags == flagSnapshot {
		// A snapshot stream is not the sender's message connection: it
		// neither replaces nor is replaced by one.
		t.snap.receive(pc, from, log)
		return
	}

	t.mu.Lock()
	if old := t.inbound[from]; old != nil {
		old.Close() // the peer reconnected; its old reader exits
	}
	t.inbound[from] = pc
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		if t.inbound[from] == pc {
			delete(t.inbound, from)
		}
		t.mu.Unlock()
	}()
	log.Debug("accepted peer connection")

	err = t.readFrames(pc, from, log)
	switch {
	case t.ctx.Err() != nil, errors.Is(err, net.ErrClosed):
	case errors.Is(err, errProtocol):
		log.Warn("closing peer connection", "err", err)
	case errors.Is(err, io.EOF):
		log.Debug("peer closed its connection")
	default:
		log.Debug("peer connection failed", "err", err)
	}
}

// tlsHandshake runs the acceptor's TLS handshake on conn within
// DialTimeout: the peer CA must have signed the sender's certificate
// (tlsconf.Peer.ServerConfig). Which member it names is checked against the
// hello that follows.
func (t *TCP) tlsHandshake(conn net.Conn) (*tls.Conn, error) {
	conn.SetDeadline(time.Now().Add(t.cfg.DialTimeout))
	tc := tls.Server(conn, t.tls.server)
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// acceptHandshake reads the hello within DialTimeout, answers it, and
// returns the sender's ID if it was accepted. With peer TLS, state is the
// connection's: the sender's certificate must name the member the hello
// says it is.
func (t *TCP) acceptHandshake(conn net.Conn, state *tls.ConnectionState) (hello, error) {
	conn.SetDeadline(time.Now().Add(t.cfg.DialTimeout))
	h, err := readHello(conn)
	if err != nil {
		return hello{}, fmt.Errorf("reading handshake: %w", err)
	}
	checked := h
	if h.Flags == flagSnapshot && t.snap != nil {
		checked.Flags = 0 // the one flag we understand, when streaming is on
	}
	status := checked.check(t.cfg.ClusterID, t.cfg.LocalID)
	resp := response{Version: ProtocolVersion, Status: status, ClusterID: t.cfg.ClusterID, ID: t.cfg.LocalID}
	var certErr error
	if status == statusOK && state != nil {
		// Before NotMember: who the sender is comes before what it may do.
		if certErr = t.tls.checkMember(*state, h.From); certErr != nil {
			resp.Status, status = statusWrongCert, statusWrongCert
		}
	}
	vouched := true
	if status == statusOK && t.cfg.NotMember != nil {
		vouched = state == nil || t.tls.vouched(*state, h.From)
		if applied, refuse := t.cfg.NotMember(h.From, vouched); refuse {
			resp.Status, resp.Applied = statusNotMember, applied
			status = statusNotMember
		}
	}
	if _, err := conn.Write(resp.marshal()); err != nil {
		return hello{}, fmt.Errorf("answering handshake: %w", err)
	}
	if certErr != nil {
		return hello{}, certErr
	}
	if status == statusNotMember {
		if !vouched {
			return hello{}, fmt.Errorf("%w: %w: sender %d, as of applied index %d", errNotMember, errUnvouched, h.From, resp.Applied)
		}
		return hello{}, fmt.Errorf("%w: sender %d, as of applied index %d", errNotMember, h.From, resp.Applied)
	}
	if status != statusOK {
		return hello{}, fmt.Errorf("%s: sender %d (version %d, cluster ID %d, addressed node %d); we are node %d of cluster %d",
			statusText(status), h.From, h.Version, h.ClusterID, h.To, t.cfg.LocalID, t.cfg.ClusterID)
	}
	conn.SetDeadline(time.Time{})
	return h, nil
}

// readFrames steps every message of every frame, in order, until an error.
// A message not addressed from the handshake's sender to this node is a
// protocol violation. Received messages count toward the sender's current
// peer counters, looked up per frame: the sender may become a peer (AddPeer)
// or stop being one while its connection lives.
func (t *TCP) readFrames(conn net.Conn, from uint64, log *slog.Logger) error {
	br := bufio.NewReaderSize(conn, readBufferSize)
	var buf []byte
	var c *peerCounters // nil for a sender we do not send to
	step := func(m *pb.Message) error {
		if m.GetFrom() != from || m.GetTo() != t.cfg.LocalID {
			return fmt.Errorf("%w: %s from %d to %d on the connection of %d to %d",
				errProtocol, m.GetType(), m.GetFrom(), m.GetTo(), from, t.cfg.LocalID)
		}
		if m.GetType() == pb.MsgSnap && t.snap != nil {
			// Its state would be missing: with streaming on, a MsgSnap
			// arrives only with its files, on a snapshot stream.
			return fmt.Errorf("%w: MsgSnap on a message connection", errProtocol)
		}
		if c != nil {
			c.received.Add(1)
		}
		if err := t.h.Step(t.ctx, m); err != nil {
			if t.ctx.Err() != nil {
				return t.ctx.Err()
			}
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				log.Debug("step failed", "type", m.GetType(), "err", err)
			}
		}
		return nil
	}
	for {
		body, err := readFrame(br, &buf)
		if err != nil {
			return err
		}
		t.mu.RLock()
		c = t.counters[from]
		t.mu.RUnlock()
		if err := decodeFrame(body, step); err != nil {
			return err
		}
		if cap(buf) > retainBytes {
			buf = nil
		}
	}
}
