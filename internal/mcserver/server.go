// Package mcserver owns the memcache TCP listener and the per-connection loop.
//
// Each connection has two goroutines. The reader parses requests (mcproto)
// and submits writes to the kv service in arrival order, so pipelined writes
// on one connection enter the log in order and share group commits; the
// writer waits for each reply in order and flushes once per pipelined batch.
// A read waits until the connection's earlier writes are applied, so a client
// always reads its own writes. The bounded queue between the two is the
// backpressure: a client that never reads stops being read from.
//
// Errors the protocol answers (ERROR, CLIENT_ERROR, SERVER_ERROR) keep the
// connection; framing errors the parser marks Close end it.
//
// Stats holds memcached's `stats` counters plus per-command reply counters and
// latency histograms (metrics.go), all atomics at fixed addresses so that the
// per-request cost is a few uncontended adds; internal/metrics reads them at
// scrape time. `stats conns` and kvd's own `stats raft` are in stats.go.
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

	"github.com/kvd-project/kvd/internal/kv"
)

// Config of the listener.
type Config struct {
	MaxItemSize    int
	MaxConnections int
	// PipelineDepth bounds replies queued per connection (default 256).
	PipelineDepth int
	// Name is this member's name, shown by `stats raft`; empty: not shown.
	Name string
	// MemberName names a raft member by ID for `stats raft` (the node's
	// cluster directory); nil or "": the member is shown by ID only.
	MemberName func(id kv.NodeID) string
}

// Server serves the memcached text protocol over a kv service.
type Server struct {
	cfg    Config
	kv     *kv.Service
	logger *slog.Logger
	stats  *Stats
	// connSeq numbers connections that have no file descriptor.
	connSeq atomic.Uint64
	// gatProbe, when set (by tests), is called as every gat chunk is
	// proposed, with its keys and the keys of its connection's gat chunks
	// proposed and not yet written, its own included.
	gatProbe atomic.Pointer[func(keys, held int)]
	// lastAccept is the second (since Stats.Started) of the last accepted
	// connection: the listener's secs_since_last_cmd in `stats conns`.
	lastAccept atomic.Int64
	// statsBase holds the running totals as of the last `stats reset`,
	// by stat name, which `stats` subtracts: the counters themselves keep
	// counting, because the Prometheus metrics read them too.
	statsBase atomic.Pointer[map[string]uint64]

	mu       sync.Mutex
	ln       net.Listener
	conns    map[*conn]struct{}
	closing  bool
	wg       sync.WaitGroup
	baseCtx  context.Context
	cancelFn context.CancelFunc
}

// New builds a server; Serve starts it.
func New(cfg Config, svc *kv.Service, logger *slog.Logger) *Server {
	if cfg.PipelineDepth <= 0 {
		cfg.PipelineDepth = 256
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, kv: svc, logger: logger, stats: newStats(),
		conns: make(map[*conn]struct{}), baseCtx: ctx, cancelFn: cancel}
}

// Stats returns the server's counters.
func (s *Server) Stats() *Stats { return s.stats }

// Serve accepts connections on ln until Shutdown. It returns nil after
// Shutdown and the accept error otherwise.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.lastAccept.Store(s.stats.sinceStart())
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
		s.lastAccept.Store(s.stats.sinceStart())
		if int(s.stats.CurrConnections.Load()) >= s.cfg.MaxConnections {
			// Counted as rejected only: memcached's total_connections
			// counts the connections it serves.
			s.stats.RejectedConnections.Add(1)
			// memcached's own words for this, then close.
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(nc, "ERROR Too many open connections\r\n")
			_ = nc.Close()
			continue
		}
		s.stats.TotalConnections.Add(1)
		c := s.newConn(nc)
		c.lastCmd.Store(s.stats.sinceStart())
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			_ = nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.stats.CurrConnections.Add(1)
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
func (s *Server) forget(c *conn) {
	s.stats.CurrConnections.Add(-1)
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

// Stats are the per-node counters the memcache `stats` command reports.
type Stats struct {
	Started             time.Time
	CurrConnections     atomic.Int64
	TotalConnections    atomic.Uint64
	RejectedConnections atomic.Uint64
	CmdGet              atomic.Uint64
	CmdSet              atomic.Uint64
	CmdTouch            atomic.Uint64
	CmdFlush            atomic.Uint64
	GetHits             atomic.Uint64
	GetMisses           atomic.Uint64
	DeleteHits          atomic.Uint64
	DeleteMisses        atomic.Uint64
	IncrHits            atomic.Uint64
	IncrMisses          atomic.Uint64
	DecrHits            atomic.Uint64
	DecrMisses          atomic.Uint64
	CasHits             atomic.Uint64
	CasMisses           atomic.Uint64
	CasBadval           atomic.Uint64
	TouchHits           atomic.Uint64
	TouchMisses         atomic.Uint64
	TotalItems          atomic.Uint64
	BytesRead           atomic.Uint64
	BytesWritten        atomic.Uint64
	ServerErrors        atomic.Uint64

	cmds commandStats
}

func newStats() *Stats { return &Stats{Started: time.Now()} }

// sinceStart is the monotonic second since Started.
func (s *Stats) sinceStart() int64 { return int64(time.Since(s.Started) / time.Second) }

// countingConn counts bytes for the bytes_read/bytes_written stats.
type countingConn struct {
	net.Conn
	s *Stats
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
