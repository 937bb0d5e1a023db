package mcserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// Reply is one request's answer, in request order. Either buf is final, or
// wait blocks until the writes it depends on are applied and renders them
// (on the connection's writer goroutine).
type Reply struct {
	buf   []byte
	wait  func() []byte
	close bool
	// op and start feed the per-operation latency histogram once the reply
	// is final; op 0 is not observed.
	op    mcproto.Op
	start time.Duration // since Counters.Started: smaller than a time.Time
	// done is closed once wait has returned (the reader's read barrier for
	// this connection's own writes).
	done chan struct{}
	// budgeted is how much of the connection's reply budget buf holds,
	// given back once it is written (or dropped).
	budgeted int
	// written, when set, is called once the reply is written or dropped.
	written func()
}

// Final is a reply whose bytes are known now.
func Final(buf []byte) *Reply { return &Reply{buf: buf} }

// ThenClose makes rp the connection's last reply: once it is written (after
// the replies before it) the connection closes, and no request after it is
// read. It returns rp.
func (rp *Reply) ThenClose() *Reply {
	rp.close = true
	return rp
}

// AfterWrite has f called on the writer goroutine once rp is written or
// dropped: what rp's bytes held in memory is then free.
func (rp *Reply) AfterWrite(f func()) { rp.written = f }

// Retrieval replies are streamed: the reader hands the writer a chunk of
// about GetChunk bytes at a time, and at most ReplyBudget bytes of them
// wait ahead of the socket per connection (a single larger value passes
// alone). A multi-get far larger than memory is then answered at the
// client's pace, and a client that asks for one and reads nothing costs the
// server this budget plus the socket buffers, not the reply.
const (
	GetChunk    = 64 << 10
	ReplyBudget = 1 << 20
)

// budget counts reply bytes queued but not yet written; the reader waits in
// acquire while the writer is behind.
type budget struct {
	mu   sync.Mutex
	cond sync.Cond
	used int
}

func (b *budget) acquire(n int) {
	b.mu.Lock()
	for b.used > 0 && b.used+n > ReplyBudget {
		b.cond.Wait()
	}
	b.used += n
	b.mu.Unlock()
}

func (b *budget) release(n int) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// Conn is one client connection: a reader goroutine that decodes requests
// and hands them to the connection's Session, and a writer goroutine that
// writes their replies in request order.
type Conn struct {
	s   *Server
	nc  net.Conn
	dec mcproto.Decoder // nil until the first byte picked the protocol
	enc mcproto.Encoder
	ss  Session
	// w is shared by the writer goroutine and the reader's direct path
	// (writeNow); wmu serialises them. queued counts replies handed to the
	// writer and not yet written: the reader may write itself only when it
	// is 0, so replies still leave in request order.
	wmu    sync.Mutex
	w      *bufio.Writer
	queue  chan *Reply
	queued atomic.Int32
	// budget bounds retrieval reply bytes in the queue; broken is set once
	// the writer can no longer write, so that a retrieval stops reading
	// items.
	budget budget
	broken atomic.Bool

	// unflushed is set when writeNow left reply bytes in w for the rest
	// of a batch; the reader flushes them before it waits for more input.
	unflushed atomic.Bool

	stopOnce sync.Once
	// draining is set when a graceful shutdown stopped the reader: the
	// connection then closes with lingerClose.
	draining atomic.Bool
	// lastWrite is the done channel of the newest reply that waits on
	// writes; reads wait for it. Only the channel is kept: the reply holds
	// its rendered bytes, which an idle connection must not keep alive.
	lastWrite chan struct{}

	// For `stats conns`: the socket's file descriptor (as memcached shows
	// it) or a sequence number, the reader's state, and the second (since
	// Counters.Started) of the last request.
	id      uint64
	addr    string
	state   atomic.Uint32
	lastCmd atomic.Int64
	// reqNow is when the request being handled was read (see Now); the
	// reader goroutine's own.
	reqNow time.Time
	// gotInput is set once the client has sent a byte; the reader's own.
	gotInput bool
}

// Connection states as `stats conns` names them (memcached's conn_* states
// that a kvd connection can be in). As in memcached 1.6, a connection is
// conn_new_cmd until it first waits for bytes; from then on, waiting for a
// line (idle after a reply, or a line cut short) is conn_read, waiting for
// a data block conn_nread, and discarding a value too large conn_swallow.
const (
	stateNewCmd uint32 = iota
	stateParseCmd
	stateClosing
	stateRead
	stateNRead
	stateSwallow
)

var stateNames = [...]string{"conn_new_cmd", "conn_parse_cmd", "conn_closing", "conn_read", "conn_nread", "conn_swallow"}

// waitStates maps what the reader waits for to the connection's state.
var waitStates = [...]uint32{
	mcproto.PhaseLine:    stateRead,
	mcproto.PhaseValue:   stateNRead,
	mcproto.PhaseSwallow: stateSwallow,
}

// connID returns nc's file descriptor, the ID memcached uses in `stats
// conns`, or for a connection without one (a pipe in tests) a sequence
// number far above any descriptor, so the two never collide.
func (s *Server) connID(nc net.Conn) uint64 {
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = tc.NetConn() // a TLS connection's socket
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			var fd uint64
			if raw.Control(func(f uintptr) { fd = uint64(f) }) == nil {
				return fd
			}
		}
	}
	return 1<<32 + s.connSeq.Add(1)
}

func (s *Server) newConn(nc net.Conn) *Conn {
	cc := countingConn{Conn: nc, s: s.counters}
	c := &Conn{
		s:  s,
		nc: nc,
		w:  bufio.NewWriterSize(cc, 16<<10),
	}
	c.queue = make(chan *Reply, s.cfg.PipelineDepth)
	c.id = s.connID(nc)
	c.addr = nc.RemoteAddr().String()
	c.budget.cond.L = &c.budget.mu
	return c
}

// stopReading makes the reader's blocked Read return so the connection can
// drain and close (graceful shutdown).
func (c *Conn) stopReading() {
	c.stopOnce.Do(func() { _ = c.nc.SetReadDeadline(time.Now()) })
}

// shutdown stops the reader for a graceful shutdown: the requests it has
// read are answered, then the connection closes (lingerClose).
func (c *Conn) shutdown() {
	c.draining.Store(true)
	c.stopReading()
}

// lingerTime bounds how long a connection closed by a graceful shutdown
// discards what its client still sends (as long as net/http waits).
const lingerTime = 500 * time.Millisecond

// lingerClose lets the client read every reply of a connection the server
// ends while the client may still be sending: a socket closed with bytes
// unread is reset, and a reset throws away what the client has not read
// yet (the reply to a write that was applied, say). So it sends FIN after
// the last reply and discards what comes until the client closes its side
// or lingerTime passes; the caller then closes. A forced shutdown closes
// the socket, which ends the wait at once.
func (c *Conn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.nc.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	_, _ = io.Copy(io.Discard, c.nc)
}

func (c *Conn) serve() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	close(c.queue)
	<-writerDone
	if c.draining.Load() && !c.broken.Load() {
		c.lingerClose() // still listed, so a forced shutdown can cut it short
	}
	c.s.forget(c) // before Close: see forget
	_ = c.nc.Close()
}

// pick reads the connection's first bytes and builds the codec of the
// protocol they open, as memcached picks one per connection.
func (c *Conn) pick() error {
	if tc, ok := c.nc.(interface {
		HandshakeContext(context.Context) error
	}); ok {
		ctx, cancel := context.WithTimeout(c.s.baseCtx, c.s.cfg.HandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.s.refused.Warn("memcache TLS handshake failed", "remote", c.addr, "err", err)
			}
			return err
		}
	}
	src := flushBeforeRead{c: c, r: countingConn{Conn: c.nc, s: c.s.counters}}
	bin, rest, err := mcproto.Sniff(src)
	if errors.Is(err, mcproto.ErrTLSOnPlaintext) {
		c.s.refused.Warn("memcache connection closed", "remote", c.addr, "err", err)
	}
	if err != nil {
		return err
	}
	lim := mcproto.Limits{MaxItemSize: c.s.cfg.MaxItemSize, MaxLine: 2048, MaxMultigetLine: 1 << 20}
	codec := c.s.codecs.Text
	if bin {
		codec = c.s.codecs.Binary
	}
	c.dec, c.enc = codec(rest, lim)
	c.ss = c.s.h.NewSession(c)
	return nil
}

func (c *Conn) readLoop() {
	var req mcproto.Request
	defer c.state.Store(stateClosing)
	started := c.s.counters.Started
	if err := c.pick(); err != nil {
		return // closed before a byte: nothing to answer
	}
	for {
		// Once a reply could not be written nobody reads the rest: the
		// requests still buffered are dropped, as memcached drops them
		// when it closes a connection on a write error, rather than
		// served (writes proposed, gats reading their values) for a
		// client that is gone while the connection keeps its slot.
		if c.broken.Load() {
			return
		}
		// The state stays conn_parse_cmd while Next decodes what is
		// buffered; flushBeforeRead marks the wait for more bytes.
		err := c.dec.Next(&req)
		c.reqNow = time.Now()
		start := c.reqNow.Sub(started)
		c.state.Store(stateParseCmd)
		if sec := int64(start / time.Second); sec != c.lastCmd.Load() {
			c.lastCmd.Store(sec) // at most once a second: loads are cheaper than stores
		}
		if err != nil {
			var perr *mcproto.Error
			if !errors.As(err, &perr) {
				return // EOF, reset, deadline: nothing to answer
			}
			rp := c.ss.Rejected(&req, perr)
			rp.close = rp.close || perr.Close
			c.Send(rp)
			if rp.close {
				return
			}
			continue
		}
		rp := c.ss.Handle(&req)
		rp.op, rp.start = req.Op, start
		if req.Op == mcproto.OpQuit {
			// Answered as its protocol says (text: not at all), then the
			// connection closes once the replies before it are written.
			rp.op, rp.close = 0, true
		}
		c.Send(rp)
		if rp.close {
			return
		}
	}
}

// Send hands rp to the writer, or writes it at once when it is final and
// nothing is queued ahead of it. The direct path is the common one (a get,
// or any request on an idle connection): it saves waking a second goroutine
// for every reply, which on a busy server costs as much as the lookup. A
// session calls it for the parts of a streamed reply; the reader calls it
// for what Handle returns. Reader goroutine only.
func (c *Conn) Send(rp *Reply) {
	if rp.wait != nil || c.queued.Load() > 0 {
		// A final reply waiting in the queue counts against the reply
		// budget as get's do: the queue bounds replies, not their bytes,
		// and a `stats conns` grows with the connections.
		if rp.wait == nil && rp.budgeted == 0 && len(rp.buf) > 0 {
			c.budget.acquire(len(rp.buf))
			rp.budgeted = len(rp.buf)
		}
		c.enqueue(rp)
		return
	}
	c.writeNow(rp)
}

// enqueue hands rp to the writer goroutine.
func (c *Conn) enqueue(rp *Reply) {
	c.queued.Add(1)
	c.queue <- rp
}

// writeNow writes a final reply on the reader's goroutine. It flushes
// unless more pipelined requests are already buffered: their replies follow
// (directly or through the writer, whose flush then covers these bytes).
func (c *Conn) writeNow(rp *Reply) {
	if rp.op != 0 {
		c.s.h.Observe(rp.op, time.Since(c.s.counters.Started)-rp.start)
	}
	c.wmu.Lock()
	if !c.broken.Load() && c.writeReply(rp, c.dec.Buffered() == 0) {
		c.broken.Store(true)
	}
	if c.w.Buffered() > 0 {
		c.unflushed.Store(true)
	}
	c.wmu.Unlock()
	if rp.budgeted > 0 {
		c.budget.release(rp.budgeted)
	}
	if rp.written != nil {
		rp.written()
	}
}

// flushBeforeRead is the reader's side of the socket. Before the reader
// waits for more bytes, it sends the replies writeNow held back for the
// rest of a batch: when what is buffered is only the start of the next
// request (a line cut in two, or a value still arriving), the finished
// replies go out now, as memcached sends them, rather than after the rest
// of the request arrives (which a client waiting for them never sends).
type flushBeforeRead struct {
	c *Conn
	r countingConn
}

func (f flushBeforeRead) Read(p []byte) (int, error) {
	// The reader is about to wait for bytes (Read is called on the
	// reader's goroutine, inside Next, so Phase is safe to call). Until
	// the client has sent anything it stays conn_new_cmd.
	if f.c.gotInput {
		if ph := f.c.dec.Phase(); int(ph) < len(waitStates) {
			f.c.state.Store(waitStates[ph])
		}
	}
	// With replies queued the writer holds the lock, maybe for long
	// (a client slow to read), and its flush covers these bytes.
	if f.c.unflushed.Load() && f.c.queued.Load() == 0 {
		f.c.flushHeld()
	}
	n, err := f.r.Read(p)
	if n > 0 {
		f.c.gotInput = true
	}
	return n, err
}

// flushHeld flushes what writeNow left in the buffer. With replies queued,
// the writer flushes once it has written them, and these bytes with them.
func (c *Conn) flushHeld() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.broken.Load() || c.queued.Load() > 0 {
		return
	}
	c.unflushed.Store(false)
	if err := c.w.Flush(); err != nil {
		c.stopReading()
		c.broken.Store(true)
	}
}

// writeLoop writes queued replies in order, waiting for each one's writes,
// and flushes when no more replies are queued (once per pipelined batch).
func (c *Conn) writeLoop() {
	for rp := range c.queue {
		if rp.wait != nil {
			rp.buf = rp.wait()
			close(rp.done)
			// The results are rendered: a gat's hold their values, which
			// must not stay in memory twice while the reply is written.
			rp.wait = nil
		}
		if rp.op != 0 {
			c.s.h.Observe(rp.op, time.Since(c.s.counters.Started)-rp.start)
		}
		c.wmu.Lock()
		if !c.broken.Load() && c.writeReply(rp, len(c.queue) == 0) {
			c.broken.Store(true)
		}
		c.wmu.Unlock()
		// Written or dropped, its bytes leave the queue: a dropped reply
		// must free the budget too, so that the reader never waits on us.
		if rp.budgeted > 0 {
			c.budget.release(rp.budgeted)
		}
		if rp.written != nil {
			rp.written()
		}
		c.queued.Add(-1)
	}
	c.wmu.Lock()
	if !c.broken.Load() {
		_ = c.w.Flush()
	}
	c.wmu.Unlock()
}

// writeReply writes one reply, and flushes when flush says the batch ends,
// and reports whether the connection is done for writing. c.wmu held.
func (c *Conn) writeReply(rp *Reply, flush bool) (broken bool) {
	if len(rp.buf) > 0 {
		if _, err := c.w.Write(rp.buf); err != nil {
			c.stopReading()
			return true
		}
	}
	if rp.close || flush {
		if err := c.w.Flush(); err != nil {
			c.stopReading()
			return true
		}
		c.unflushed.Store(false)
	}
	if rp.close {
		// The reader has stopped (a closing reply is its last) and serve
		// closes the socket once the connection's slot is given back.
		return true
	}
	return false
}

// Budgeted wraps part of a streamed reply, waiting until the connection's
// reply budget has room for it. Reader goroutine only.
func (c *Conn) Budgeted(buf []byte) *Reply {
	c.budget.acquire(len(buf))
	return &Reply{buf: buf, budgeted: len(buf)}
}

// Pending is a reply that waits for writes: wait blocks until they are
// applied and renders their results. It runs on the writer goroutine, in
// reply order; until it has returned, the connection's reads wait
// (WaitOwnWrites). Reader goroutine only.
func (c *Conn) Pending(wait func() []byte) *Reply {
	rp := &Reply{wait: wait, done: make(chan struct{})}
	c.lastWrite = rp.done
	return rp
}

// WaitOwnWrites is the read barrier for this connection's earlier writes:
// it returns once every reply built by Pending so far has been rendered.
// Reader goroutine only.
func (c *Conn) WaitOwnWrites() {
	if c.lastWrite != nil {
		<-c.lastWrite
		c.lastWrite = nil
	}
}

// Broken reports whether the connection can no longer write: nobody will
// read the rest of a reply.
func (c *Conn) Broken() bool { return c.broken.Load() }

// Encoder renders replies in the connection's protocol.
func (c *Conn) Encoder() mcproto.Encoder { return c.enc }

// Now is when the request being handled was read, as the clock the
// listener already read for its latency: a handler's coarse time
// decisions need no clock read of their own. Reader goroutine only.
func (c *Conn) Now() time.Time { return c.reqNow }

// Context ends when the server shuts down for good: waits on writes give
// up then.
func (c *Conn) Context() context.Context { return c.s.baseCtx }

// RemoteAddr is the client's address, host:port.
func (c *Conn) RemoteAddr() string { return c.addr }

// Server is the listener the connection belongs to.
func (c *Conn) Server() *Server { return c.s }

// Done is closed once a Pending reply's wait has returned; nil for a final
// reply.
func (rp *Reply) Done() <-chan struct{} { return rp.done }
