// Package mcserver owns the memcache TCP listener and the per-connection
// loop, over any protocol: it knows no reply strings and no semantics.
//
// A connection's first byte picks its codec (mcproto.Sniff; Codecs says
// which package serves each protocol). Each connection has two goroutines.
// The reader decodes requests and hands each to the connection's Session
// (the memcache semantics, internal/memcache), which submits writes in
// arrival order, so pipelined writes on one connection enter the log in
// order and share group commits; the writer waits for each reply in order
// and flushes once per pipelined batch. A read waits until the connection's
// earlier writes are applied (WaitOwnWrites), so a client always reads its
// own writes. The bounded queue between the two, and the reply budget of
// streamed replies, are the backpressure: a client that never reads stops
// being read from.
//
// Errors a codec answers keep the connection; errors it marks Close end it.
package mcserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/ratelog"
)

// Config of the listener.
type Config struct {
	MaxItemSize    int
	MaxConnections int
	// PipelineDepth bounds replies queued per connection (default 256).
	PipelineDepth int
	// HandshakeTimeout bounds a TLS connection's handshake (default 10s):
	// a client that opens a connection and stalls must not hold a
	// connection slot for longer.
	HandshakeTimeout time.Duration
}

// Codecs builds each protocol's codec over a connection's bytes.
type Codecs struct {
	// Text serves connections whose first byte is not 0x80: the text
	// protocol and its meta commands.
	Text func(r io.Reader, lim mcproto.Limits) (mcproto.Decoder, mcproto.Encoder)
	// Binary serves connections whose first byte is 0x80.
	Binary func(r io.Reader, lim mcproto.Limits) (mcproto.Decoder, mcproto.Encoder)
}

// Server serves memcache connections, handing their requests to a Handler.
type Server struct {
	cfg      Config
	codecs   Codecs
	h        Handler
	counters *Counters
	logger   *slog.Logger
	// connSeq numbers connections that have no file descriptor.
	connSeq atomic.Uint64
	// refused logs connections closed before their first request (a
	// failed TLS handshake, TLS on a plaintext port): an outsider can
	// provoke those at will.
	refused *ratelog.Limiter
	// lastAccept is the second (since Counters.Started) of the last
	// accepted connection: the listener's secs_since_last_cmd in `stats
	// conns`.
	lastAccept atomic.Int64

	mu       sync.Mutex
	ln       net.Listener
	conns    map[*Conn]struct{}
	closing  bool
	wg       sync.WaitGroup
	baseCtx  context.Context
	cancelFn context.CancelFunc
}

// New builds a server that counts its connections in counters; Serve starts
// it.
func New(cfg Config, codecs Codecs, h Handler, counters *Counters, logger *slog.Logger) *Server {
	if cfg.PipelineDepth <= 0 {
		cfg.PipelineDepth = 256
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if counters.Started.IsZero() {
		counters.Started = time.Now()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, codecs: codecs, h: h, counters: counters, logger: logger,
		refused: ratelog.New(logger, time.Second),
		conns:   make(map[*Conn]struct{}), baseCtx: ctx, cancelFn: cancel}
}

// Serve accepts connections on ln until Shutdown. It returns nil after
// Shutdown and the accept error otherwise.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.lastAccept.Store(s.counters.SinceStart())
	closing := s.closing
	s.mu.Unlock()
	if closing {
		// Shutdown came first and found no listener to close.
		_ = ln.Close()
		return nil
	}
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			// Out of file descriptors and similar passing conditions: back off
			// and keep serving the connections we have.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logger.Warn("accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.lastAccept.Store(s.counters.SinceStart())
		if int(s.counters.CurrConnections.Load()) >= s.cfg.MaxConnections {
			// Counted as rejected only: memcached's total_connections
			// counts the connections it serves.
			s.counters.RejectedConnections.Add(1)
			// memcached's own words for this, then close.
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(nc, "ERROR Too many open connections\r\n")
			_ = nc.Close()
			continue
		}
		s.counters.TotalConnections.Add(1)
		c := s.newConn(nc)
		c.lastCmd.Store(s.counters.SinceStart())
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			_ = nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.counters.CurrConnections.Add(1)
		go func() {
			defer s.wg.Done()
			c.serve()
		}()
		// Let the new connection read before the next one is accepted. A
		// new goroutine takes the scheduler's next slot, so without this
		// a connection accepted right after it (already queued in the
		// backlog) displaced it and was served first: a client that sent
		// a noreply write, closed, reconnected and wrote again saw its
		// second write applied before the first, two times in three.
		runtime.Gosched()
	}
}

// forget takes c off the server's books (curr_connections, `stats conns`).
// The connection calls it before it closes its socket: a client that reads
// EOF and reconnects at once, at --max-connections, must find its slot free,
// and the descriptor, which `stats conns` shows as the ID, must not be
// reused by a new connection while c is still listed under it.
func (s *Server) forget(c *Conn) {
	s.counters.CurrConnections.Add(-1)
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, stops reading new requests, lets replies already
// in flight be written, closes each connection so that its client can read
// them (lingerClose), and waits for every connection (bounded by ctx).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	if s.ln != nil {
		_ = s.ln.Close()
	}
	for c := range s.conns {
		c.shutdown()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.cancelFn()
		return nil
	case <-ctx.Done():
		s.cancelFn() // abandon waits; their outcome is unknown to the client
		s.mu.Lock()
		for c := range s.conns {
			_ = c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// Counters are the listener's own counters, which memcached's `stats`
// reports beside the command counters: connections and bytes.
type Counters struct {
	// Started is when the server started counting (uptime).
	Started             time.Time
	CurrConnections     atomic.Int64
	TotalConnections    atomic.Uint64
	RejectedConnections atomic.Uint64
	BytesRead           atomic.Uint64
	BytesWritten        atomic.Uint64
}

// SinceStart is the monotonic second since Started.
func (c *Counters) SinceStart() int64 { return int64(time.Since(c.Started) / time.Second) }

// countingConn counts bytes for the bytes_read/bytes_written stats.
type countingConn struct {
	net.Conn
	s *Counters
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.s.BytesRead.Add(uint64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.s.BytesWritten.Add(uint64(n))
	return n, err
}
