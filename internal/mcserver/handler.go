package mcserver

import (
	"cmp"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// Handler gives requests their meaning: internal/memcache implements it
// for every protocol at once. The listener owns this interface so that it
// can be tested with a handler of its own, without a node.
type Handler interface {
	// NewSession starts serving c, once its protocol is known; the session
	// lives as long as the connection.
	NewSession(c *Conn) Session
	// Observe records how long a request of op took, from its decoding to
	// its reply being final. Any goroutine.
	Observe(op mcproto.Op, d time.Duration)
}

// Session answers one connection's requests, on its reader goroutine.
type Session interface {
	// Handle answers req: a final reply, or one pending on writes. The
	// session may Send parts of a long reply first; req's buffers are
	// valid only until Handle returns.
	Handle(req *mcproto.Request) *Reply
	// Rejected answers a request the codec refused with perr (whose Reply
	// is the codec's answer), and counts it.
	Rejected(req *mcproto.Request, perr *mcproto.Error) *Reply
}

// ConnInfo is one row of `stats conns`: the listener or a connection.
type ConnInfo struct {
	// ID is the socket's file descriptor, as memcached shows it.
	ID uint64
	// Addr is "tcp:" and the peer's (or the listener's) address.
	Addr string
	// State is memcached's name for what it is doing (conn_listening,
	// conn_read, conn_nread, …).
	State string
	// LastCmd is the second, since Counters.Started, of its last request
	// (of its last accept, for the listener).
	LastCmd int64
}

// Conns lists the listener (first, if serving) and every client connection,
// ordered by ID. listenAddr is the listener's address, "" before Serve.
func (s *Server) Conns() (rows []ConnInfo, listenAddr string) {
	s.mu.Lock()
	if s.ln != nil {
		listenAddr = "tcp:" + s.ln.Addr().String()
		rows = append(rows, ConnInfo{ID: listenerID(s.ln), Addr: listenAddr, State: "conn_listening", LastCmd: s.lastAccept.Load()})
	}
	for c := range s.conns {
		st := c.state.Load()
		name := "conn_closing"
		if int(st) < len(stateNames) {
			name = stateNames[st]
		}
		rows = append(rows, ConnInfo{ID: c.id, Addr: "tcp:" + c.addr, State: name, LastCmd: c.lastCmd.Load()})
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b ConnInfo) int { return cmp.Compare(a.ID, b.ID) })
	return rows, listenAddr
}

// listenerID is the listening socket's descriptor, or 0 without one.
func listenerID(ln net.Listener) uint64 {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var fd uint64
	if raw.Control(func(f uintptr) { fd = uint64(f) }) != nil {
		return 0
	}
	return fd
}
