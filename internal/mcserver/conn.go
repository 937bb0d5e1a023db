package mcserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/mcproto"
)

// reply is one request's answer, in request order. Either buf is final, or
// calls must be waited for and render turns their results into bytes.
type reply struct {
	buf    []byte
	calls  []*kv.Call
	render func(dst []byte, res []command.Result, err error) []byte
	close  bool
	// cmd and start feed the per-command latency histogram once the reply
	// is final; cmd 0 is not observed.
	cmd   mcproto.Command
	start time.Duration // since Stats.Started: smaller than a time.Time
	// done is closed once the calls are waited for (the reader's read barrier
	// for this connection's own writes).
	done chan struct{}
	// budgeted is how much of the connection's reply budget buf holds,
	// given back once it is written (or dropped).
	budgeted int
	// gatKeys is how many keys of a gat this reply touches (see gat),
	// counted out of conn.gatKeys once it is written (or dropped).
	gatKeys int
}

// Get replies are streamed: the reader hands the writer a chunk of about
// getChunk bytes at a time, and at most replyBudget bytes of them wait
// ahead of the socket per connection (a single larger value passes alone).
// A multi-get far larger than memory is then answered at the client's pace,
// and a client that asks for one and reads nothing costs the server this
// budget plus the socket buffers, not the reply.
const (
	getChunk    = 64 << 10
	replyBudget = 1 << 20
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
	for b.used > 0 && b.used+n > replyBudget {
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

type conn struct {
	s  *Server
	nc net.Conn
	r  *mcproto.Reader
	// w is shared by the writer goroutine and the reader's direct path
	// (writeNow); wmu serialises them. queued counts replies handed to the
	// writer and not yet written: the reader may write itself only when it
	// is 0, so replies still leave in request order.
	wmu    sync.Mutex
	w      *bufio.Writer
	queue  chan *reply
	queued atomic.Int32
	// budget bounds get reply bytes in the queue; broken is set once the
	// writer can no longer write, so that a get stops reading items.
	budget budget
	broken atomic.Bool

	// unflushed is set when writeNow left reply bytes in w for the rest
	// of a batch; the reader flushes them before it waits for more input.
	unflushed atomic.Bool

	stopOnce sync.Once
	// draining is set when a graceful shutdown stopped the reader: the
	// connection then closes with lingerClose.
	draining atomic.Bool
	// lastWrite is the done channel of the newest reply with calls; reads
	// wait for it. Only the channel is kept: the reply holds its rendered
	// bytes, which an idle connection must not keep alive.
	lastWrite chan struct{}
	// gatDone are the done channels of the last two gat chunks proposed on
	// this connection, older first (see gat).
	gatDone [2]chan struct{}
	// gatKeys counts the keys of gat chunks proposed on this connection
	// and not yet written: what holds their values in memory.
	gatKeys atomic.Int64
	// gatKeyBytes is the reply bytes per key of the newest gat chunk the
	// writer rendered, or before any the item size limit (the most a key
	// can hold): how gat sizes its next chunk. An estimate, not a bound:
	// a gat whose values grow from small to large midway has chunks of
	// gatChunk keys of them in flight until one of them is rendered.
	gatKeyBytes atomic.Int64

	// For `stats conns`: the socket's file descriptor (as memcached shows
	// it) or a sequence number, the reader's state, and the second (since
	// Stats.Started) of the last command.
	id      uint64
	addr    string
	state   atomic.Uint32
	lastCmd atomic.Int64
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

func (s *Server) newConn(nc net.Conn) *conn {
	cc := countingConn{Conn: nc, s: s.stats}
	c := &conn{
		s:  s,
		nc: nc,
		w:  bufio.NewWriterSize(cc, 16<<10),
	}
	c.r = mcproto.NewReader(flushBeforeRead{c: c, r: cc}, mcproto.Limits{
		MaxItemSize:     s.cfg.MaxItemSize,
		MaxLine:         2048,
		MaxMultigetLine: 1 << 20,
	})
	c.queue = make(chan *reply, s.cfg.PipelineDepth)
	c.id = s.connID(nc)
	c.addr = nc.RemoteAddr().String()
	c.budget.cond.L = &c.budget.mu
	c.gatKeyBytes.Store(int64(s.cfg.MaxItemSize))
	return c
}

// stopReading makes the reader's blocked Read return so the connection can
// drain and close (graceful shutdown).
func (c *conn) stopReading() {
	c.stopOnce.Do(func() { _ = c.nc.SetReadDeadline(time.Now()) })
}

// shutdown stops the reader for a graceful shutdown: the requests it has
// read are answered, then the connection closes (lingerClose).
func (c *conn) shutdown() {
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
func (c *conn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.nc.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	_, _ = io.Copy(io.Discard, c.nc)
}

func (c *conn) serve() {
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

func (c *conn) readLoop() {
	var req mcproto.Request
	defer c.state.Store(stateClosing)
	st := c.s.stats
	for {
		// Once a reply could not be written nobody reads the rest: the
		// requests still buffered are dropped, as memcached drops them
		// when it closes a connection on a write error, rather than
		// served (writes proposed, gats reading their values) for a
		// client that is gone while the connection keeps its slot.
		if c.broken.Load() {
			return
		}
		// The state stays conn_parse_cmd while Next parses what is
		// buffered; flushBeforeRead marks the wait for more bytes.
		err := c.r.Next(&req)
		start := time.Since(st.Started)
		c.state.Store(stateParseCmd)
		if sec := int64(start / time.Second); sec != c.lastCmd.Load() {
			c.lastCmd.Store(sec) // at most once a second: loads are cheaper than stores
		}
		if err != nil {
			var perr *mcproto.Error
			if !errors.As(err, &perr) {
				return // EOF, reset, deadline: nothing to answer
			}
			if perr.TooLarge {
				st.count(req.Command, ResultServerError, 1)
				c.tooLarge(&req, perr)
				continue
			}
			// The parser rejected the line, so which command it meant is
			// not reliable: such requests count as "unknown", except in the
			// general stats where memcached counts them anyway.
			st.count(0, replyResult(perr.Line()), 1)
			st.countRejected(perr.Counted)
			var buf []byte
			switch {
			case perr.Raw != nil:
				buf = perr.Raw
			case perr.Reply != "":
				buf = mcproto.AppendLine(nil, perr.Reply)
			}
			c.send(&reply{buf: buf, close: perr.Close})
			if perr.Close {
				return
			}
			continue
		}
		if req.Command == mcproto.CmdQuit {
			return
		}
		rp := c.handle(&req)
		rp.cmd, rp.start = req.Command, start
		c.send(rp)
	}
}

// send hands rp to the writer, or writes it at once when it is final and
// nothing is queued ahead of it. The direct path is the common one (a get,
// or any request on an idle connection): it saves waking a second goroutine
// for every reply, which on a busy server costs as much as the lookup.
func (c *conn) send(rp *reply) {
	if rp.calls != nil || c.queued.Load() > 0 {
		// A final reply waiting in the queue counts against the reply
		// budget as get's do: the queue bounds replies, not their bytes,
		// and a `stats conns` grows with the connections.
		if rp.calls == nil && rp.budgeted == 0 && len(rp.buf) > 0 {
			c.budget.acquire(len(rp.buf))
			rp.budgeted = len(rp.buf)
		}
		c.enqueue(rp)
		return
	}
	c.writeNow(rp)
}

// enqueue hands rp to the writer goroutine.
func (c *conn) enqueue(rp *reply) {
	c.queued.Add(1)
	c.queue <- rp
}

// writeNow writes a final reply on the reader's goroutine. It flushes
// unless more pipelined requests are already buffered: their replies follow
// (directly or through the writer, whose flush then covers these bytes).
func (c *conn) writeNow(rp *reply) {
	if rp.cmd != 0 {
		c.s.stats.observe(rp.cmd, time.Since(c.s.stats.Started)-rp.start)
	}
	c.wmu.Lock()
	if !c.broken.Load() && c.writeReply(rp, c.r.Buffered() == 0) {
		c.broken.Store(true)
	}
	if c.w.Buffered() > 0 {
		c.unflushed.Store(true)
	}
	c.wmu.Unlock()
	if rp.budgeted > 0 {
		c.budget.release(rp.budgeted)
	}
}

// flushBeforeRead is the reader's side of the socket. Before the reader
// waits for more bytes, it sends the replies writeNow held back for the
// rest of a batch: when what is buffered is only the start of the next
// request (a line cut in two, or a value still arriving), the finished
// replies go out now, as memcached sends them, rather than after the rest
// of the request arrives (which a client waiting for them never sends).
type flushBeforeRead struct {
	c *conn
	r countingConn
}

func (f flushBeforeRead) Read(p []byte) (int, error) {
	// The reader is about to wait for bytes (Read is called on the
	// reader's goroutine, inside Next, so Phase is safe to call). Until
	// the client has sent anything it stays conn_new_cmd.
	if ph := f.c.r.Phase(); f.c.gotInput && int(ph) < len(waitStates) {
		f.c.state.Store(waitStates[ph])
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
func (c *conn) flushHeld() {
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

// replyResult classifies a parser's error reply.
func replyResult(line string) Result {
	switch {
	case strings.HasPrefix(line, "CLIENT_ERROR"):
		return ResultClientError
	case strings.HasPrefix(line, "SERVER_ERROR"):
		return ResultServerError
	}
	return ResultError
}

// writeLoop writes queued replies in order, waiting for each one's writes,
// and flushes when no more replies are queued (once per pipelined batch).
func (c *conn) writeLoop() {
	for rp := range c.queue {
		if rp.calls != nil {
			rp.buf = c.await(rp)
			// The results are rendered: a gat's hold their values, which
			// must not stay in memory twice while the reply is written.
			rp.calls = nil
		}
		if rp.cmd != 0 {
			c.s.stats.observe(rp.cmd, time.Since(c.s.stats.Started)-rp.start)
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
		if rp.gatKeys > 0 {
			c.gatKeys.Add(-int64(rp.gatKeys))
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
func (c *conn) writeReply(rp *reply, flush bool) (broken bool) {
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

// budgeted wraps part of a get reply, waiting until the connection's reply
// budget has room for it.
func (c *conn) budgeted(buf []byte) *reply {
	c.budget.acquire(len(buf))
	return &reply{buf: buf, budgeted: len(buf)}
}

func (c *conn) await(rp *reply) []byte {
	defer close(rp.done)
	res := make([]command.Result, len(rp.calls))
	var firstErr error
	for i, call := range rp.calls {
		if call == nil {
			continue
		}
		r, err := call.Wait(c.s.baseCtx)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		res[i] = r
	}
	return rp.render(nil, res, firstErr)
}

// waitOwnWrites is the read barrier for this connection's earlier writes.
func (c *conn) waitOwnWrites() {
	if c.lastWrite != nil {
		<-c.lastWrite
		c.lastWrite = nil
	}
}

// submit proposes one command for rp, keeping connection order.
func (c *conn) submit(cmd *command.Command) (*kv.Call, error) {
	return c.s.kv.Submit(c.s.baseCtx, cmd)
}

// pending builds a reply waiting on calls.
func (c *conn) pending(calls []*kv.Call, render func([]byte, []command.Result, error) []byte) *reply {
	rp := &reply{calls: calls, render: render, done: make(chan struct{})}
	c.lastWrite = rp.done
	return rp
}

func (c *conn) tooLarge(req *mcproto.Request, perr *mcproto.Error) {
	// memcached drops the old item when a set is refused as too large, so a
	// client never reads a stale value it believes it replaced.
	if req.Command == mcproto.CmdSet && len(req.Keys) == 1 {
		if call, err := c.submit(&command.Command{Op: command.OpDelete, Key: req.Keys[0]}); err == nil {
			c.enqueue(c.pending([]*kv.Call{call}, func(dst []byte, _ []command.Result, _ error) []byte {
				return dst
			}))
		}
	}
	var buf []byte
	if perr.Reply != "" {
		buf = mcproto.AppendLine(nil, perr.Reply)
	}
	c.send(&reply{buf: buf, close: perr.Close})
}

func errorReply(dst []byte, err error) []byte {
	switch {
	case errors.Is(err, kv.ErrNoLeader), errors.Is(err, kv.ErrNotReady):
		return mcproto.AppendServerError(dst, "unavailable: no quorum or leader")
	case errors.Is(err, kv.ErrBusy):
		return mcproto.AppendServerError(dst, "busy: too many requests in flight")
	case errors.Is(err, kv.ErrNoSpace):
		// What memcached -M answers when it is full and may not evict.
		return mcproto.AppendLine(dst, mcproto.MsgOutOfMemoryStore)
	case errors.Is(err, kv.ErrUnknownOutcome):
		return mcproto.AppendServerError(dst, "timeout: outcome unknown, the write may have been applied")
	case errors.Is(err, kv.ErrTimeout):
		return mcproto.AppendServerError(dst, "timeout")
	case errors.Is(err, kv.ErrStopped), errors.Is(err, context.Canceled):
		return mcproto.AppendServerError(dst, "shutting down")
	default:
		return mcproto.AppendServerError(dst, err.Error())
	}
}
