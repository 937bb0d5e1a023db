package mcserver

import (
	"bufio"
	"context"
	"errors"
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
	render func(dst []byte, res []kv.Result, err error) []byte
	close  bool
	// cmd and start feed the per-command latency histogram once the reply
	// is final; cmd 0 is not observed.
	cmd   mcproto.Command
	start time.Duration // since Stats.Started: smaller than a time.Time
	// done is closed once the calls are waited for (the reader's read barrier
	// for this connection's own writes).
	done chan struct{}
}

type conn struct {
	s     *Server
	nc    net.Conn
	r     *mcproto.Reader
	w     *bufio.Writer
	queue chan *reply

	stopOnce  sync.Once
	lastWrite *reply // the newest reply with calls; reads wait for it

	// For `stats conns`: the socket's file descriptor (as memcached shows
	// it) or a sequence number, the reader's state, and the second (since
	// Stats.Started) of the last command.
	id      uint64
	addr    string
	state   atomic.Uint32
	lastCmd atomic.Int64
}

// Connection states as `stats conns` names them (memcached's conn_* states
// that a kvd connection can be in).
// An idle connection is conn_new_cmd, as in memcached.
const (
	stateNewCmd uint32 = iota
	stateParseCmd
	stateClosing
)

var stateNames = [...]string{"conn_new_cmd", "conn_parse_cmd", "conn_closing"}

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
	return &conn{
		s:  s,
		nc: nc,
		r: mcproto.NewReader(cc, mcproto.Limits{
			MaxItemSize:     s.cfg.MaxItemSize,
			MaxLine:         2048,
			MaxMultigetLine: 1 << 20,
		}),
		w:     bufio.NewWriterSize(cc, 16<<10),
		queue: make(chan *reply, s.cfg.PipelineDepth),
		id:    s.connID(nc),
		addr:  nc.RemoteAddr().String(),
	}
}

// stopReading makes the reader's blocked Read return so the connection can
// drain and close (graceful shutdown).
func (c *conn) stopReading() {
	c.stopOnce.Do(func() { _ = c.nc.SetReadDeadline(time.Now()) })
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
	_ = c.nc.Close()
}

func (c *conn) readLoop() {
	var req mcproto.Request
	defer c.state.Store(stateClosing)
	st := c.s.stats
	for {
		c.state.Store(stateNewCmd)
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
			// not reliable: such requests count as "unknown".
			st.count(0, replyResult(perr.Reply), 1)
			var buf []byte
			if perr.Reply != "" {
				buf = mcproto.AppendLine(nil, perr.Reply)
			}
			c.queue <- &reply{buf: buf, close: perr.Close}
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
		c.queue <- rp
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

// writeLoop writes replies in order, waiting for each one's writes, and
// flushes when no more replies are queued (once per pipelined batch).
func (c *conn) writeLoop() {
	broken := false
	for rp := range c.queue {
		if rp.calls != nil {
			rp.buf = c.await(rp)
		}
		if rp.cmd != 0 {
			c.s.stats.observe(rp.cmd, time.Since(c.s.stats.Started)-rp.start)
		}
		if broken {
			continue // keep draining so the reader never blocks on us
		}
		if len(rp.buf) > 0 {
			if _, err := c.w.Write(rp.buf); err != nil {
				broken = true
				c.stopReading()
				continue
			}
		}
		if rp.close || len(c.queue) == 0 {
			if err := c.w.Flush(); err != nil {
				broken = true
				c.stopReading()
			}
		}
		if rp.close {
			broken = true
			_ = c.nc.Close()
		}
	}
	if !broken {
		_ = c.w.Flush()
	}
}

func (c *conn) await(rp *reply) []byte {
	defer close(rp.done)
	res := make([]kv.Result, len(rp.calls))
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
		<-c.lastWrite.done
		c.lastWrite = nil
	}
}

// submit proposes one command for rp, keeping connection order.
func (c *conn) submit(cmd *command.Command) (*kv.Call, error) {
	return c.s.kv.Submit(c.s.baseCtx, cmd)
}

// pending builds a reply waiting on calls.
func (c *conn) pending(calls []*kv.Call, render func([]byte, []kv.Result, error) []byte) *reply {
	rp := &reply{calls: calls, render: render, done: make(chan struct{})}
	c.lastWrite = rp
	return rp
}

func (c *conn) tooLarge(req *mcproto.Request, perr *mcproto.Error) {
	// memcached drops the old item when a set is refused as too large, so a
	// client never reads a stale value it believes it replaced.
	if req.Command == mcproto.CmdSet && len(req.Keys) == 1 {
		if call, err := c.submit(&command.Command{Op: command.OpDelete, Key: req.Keys[0]}); err == nil {
			c.queue <- c.pending([]*kv.Call{call}, func(dst []byte, _ []kv.Result, _ error) []byte {
				return dst
			})
		}
	}
	var buf []byte
	if perr.Reply != "" {
		buf = mcproto.AppendLine(nil, perr.Reply)
	}
	c.queue <- &reply{buf: buf, close: perr.Close}
}

func errorReply(dst []byte, err error) []byte {
	switch {
	case errors.Is(err, kv.ErrNoLeader), errors.Is(err, kv.ErrNotReady):
		return mcproto.AppendServerError(dst, "unavailable: no quorum or leader")
	case errors.Is(err, kv.ErrBusy):
		return mcproto.AppendServerError(dst, "busy: too many requests in flight")
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
