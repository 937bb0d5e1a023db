package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// memcacheDriver is a minimal client of memcached's text protocol: get, set,
// version and stats, pipelined. It shares no code with kvd's server so that
// kvd and memcached are measured by the same, independent client. With tls
// set it speaks TLS; with user set it authenticates each connection first
// (auth.go).
type memcacheDriver struct {
	tls            *tls.Config
	user, password string
}

func (memcacheDriver) Name() string       { return "memcache" }
func (memcacheDriver) MemcacheKeys() bool { return true }

const (
	mcBufSize = 64 << 10
	// mcMaxValue bounds the VALUE length the client accepts before allocating.
	mcMaxValue = 64 << 20
	// mcConcurrentWrite: a batch whose requests exceed this is written from a
	// second goroutine while replies are read, so neither side can block the
	// other on full socket buffers.
	mcConcurrentWrite = 256 << 10
)

// longAgo unblocks every pending read and write when set as a deadline.
var longAgo = time.Unix(1, 0)

type mcConn struct {
	nc      net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	timeout time.Duration
}

func (m memcacheDriver) Dial(ctx context.Context, addr string, timeout time.Duration) (Conn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, classifyDial(err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if m.tls != nil {
		if nc, err = m.startTLS(ctx, nc, addr, timeout); err != nil {
			return nil, err
		}
	}
	c := &mcConn{nc: nc, timeout: timeout}
	c.initBuffers()
	if m.user != "" {
		if e := c.authenticate(m.user, m.password); e != nil {
			_ = nc.Close()
			return nil, e
		}
	}
	return c, nil
}

// initBuffers sizes the connection's reader and writer.
func (c *mcConn) initBuffers() {
	c.r, c.w = bufio.NewReaderSize(c.nc, mcBufSize), bufio.NewWriterSize(c.nc, mcBufSize)
}

func (c *mcConn) Close() error { return c.nc.Close() }

// Do writes every request of ops, flushes once, and reads the replies in
// order. A reply that leaves the connection's state unknown (CLIENT_ERROR,
// ERROR, an unparseable line) fails the remaining ops as aborted and
// returns an error so the caller reconnects.
func (c *mcConn) Do(ctx context.Context, ops []Op, res []Result) error {
	if err := c.nc.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		e := classifyIO(err)
		failRest(res, 0, e)
		return e
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(longAgo) })
	defer stop()

	size := 0
	for i := range ops {
		size += len(ops[i].Key) + len(ops[i].Value) + 32
	}
	var werrc chan error
	if size > mcConcurrentWrite {
		werrc = make(chan error, 1)
		go func() { werrc <- c.writeBatch(ops) }()
	} else if err := c.writeBatch(ops); err != nil {
		e := classifyIO(err)
		failRest(res, 0, e)
		return e
	}
	rerr := c.readBatch(ops, res)
	if werrc != nil {
		if rerr != nil {
			_ = c.nc.SetDeadline(longAgo)
		}
		if werr := <-werrc; werr != nil && rerr == nil {
			return classifyIO(werr)
		}
	}
	return rerr
}

func (c *mcConn) writeBatch(ops []Op) error {
	var num [20]byte
	for i := range ops {
		op := &ops[i]
		switch op.Kind {
		case OpGet:
			c.w.WriteString("get ")
			c.w.Write(op.Key)
			c.w.WriteString("\r\n")
		case OpSet:
			c.w.WriteString("set ")
			c.w.Write(op.Key)
			c.w.WriteString(" 0 0 ")
			c.w.Write(strconv.AppendInt(num[:0], int64(len(op.Value)), 10))
			c.w.WriteString("\r\n")
			c.w.Write(op.Value)
			c.w.WriteString("\r\n")
		default:
			return fmt.Errorf("memcache: unsupported op %v", op.Kind)
		}
	}
	return c.w.Flush()
}

// readBatch reads one reply per op.
func (c *mcConn) readBatch(ops []Op, res []Result) error {
	for i := range ops {
		r := &res[i]
		r.Hit, r.Err = false, nil
		fatal := c.readReply(&ops[i], r)
		r.Done = time.Now()
		if fatal != nil {
			failRest(res, i+1, abortedBy(fatal))
			if r.Err == nil {
				r.Err = fatal
			}
			return fatal
		}
	}
	return nil
}

// abortedBy is the error given to the pipelined ops behind a fatal one: a
// dead connection fails them all alike; a desynchronised one aborts them.
func abortedBy(e *OpError) *OpError {
	switch e.Kind {
	case ErrConnClosed, ErrIO, ErrTimeout:
		return e
	}
	return &OpError{Kind: ErrAborted, Msg: "after " + e.Kind + " on the same connection"}
}

// readReply reads the reply to op into r. It sets r.Err for an answered
// failure and returns a non-nil error when the connection is unusable.
func (c *mcConn) readReply(op *Op, r *Result) *OpError {
	line, e := c.readLine()
	if e != nil {
		r.Err = e
		return e
	}
	if op.Kind == OpSet {
		switch {
		case bytes.Equal(line, []byte("STORED")):
			return nil
		case bytes.Equal(line, []byte("NOT_STORED")), bytes.Equal(line, []byte("EXISTS")), bytes.Equal(line, []byte("NOT_FOUND")):
			r.Err = &OpError{Kind: ErrNotStored, Msg: string(line)}
			return nil
		}
		return c.errorLine(line, r)
	}
	if bytes.Equal(line, []byte("END")) {
		return nil // miss
	}
	rest, ok := bytes.CutPrefix(line, []byte("VALUE "))
	if !ok {
		return c.errorLine(line, r)
	}
	// VALUE <key> <flags> <bytes> [<cas unique>]
	f := bytes.Fields(rest)
	if len(f) < 3 || !bytes.Equal(f[0], op.Key) {
		return c.protocolError(r, "unexpected VALUE line %.80q", line)
	}
	n, err := strconv.Atoi(string(f[2]))
	if err != nil || n < 0 || n > mcMaxValue {
		return c.protocolError(r, "bad VALUE length in %.80q", line)
	}
	if cap(r.Value) < n+2 {
		r.Value = make([]byte, n+2)
	}
	buf := r.Value[:n+2]
	if _, err := io.ReadFull(c.r, buf); err != nil {
		e := classifyIO(err)
		r.Err = e
		return e
	}
	if buf[n] != '\r' || buf[n+1] != '\n' {
		return c.protocolError(r, "value of %q not terminated by CRLF", op.Key)
	}
	r.Value = buf[:n]
	end, e := c.readLine()
	if e != nil {
		r.Err = e
		return e
	}
	if !bytes.Equal(end, []byte("END")) {
		return c.protocolError(r, "expected END after a value, got %.80q", end)
	}
	r.Hit = true
	return nil
}

// errorLine classifies an error reply. SERVER_ERROR leaves the connection in
// step (memcached swallows the rejected data); anything else may not.
func (c *mcConn) errorLine(line []byte, r *Result) *OpError {
	switch {
	case bytes.HasPrefix(line, []byte("SERVER_ERROR")):
		r.Err = &OpError{Kind: ErrServer, Msg: string(line)}
		return nil
	case bytes.HasPrefix(line, []byte("CLIENT_ERROR")):
		r.Err = &OpError{Kind: ErrClient, Msg: string(line)}
		return r.Err
	case bytes.Equal(line, []byte("ERROR")):
		r.Err = &OpError{Kind: ErrUnknownCommand, Msg: "ERROR"}
		return r.Err
	}
	return c.protocolError(r, "unexpected reply %.80q", line)
}

func (c *mcConn) protocolError(r *Result, format string, a ...any) *OpError {
	r.Err = &OpError{Kind: ErrProtocol, Msg: fmt.Sprintf(format, a...)}
	return r.Err
}

// readLine returns one CRLF-terminated line without its terminator. The
// slice is valid until the next read.
func (c *mcConn) readLine() ([]byte, *OpError) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, &OpError{Kind: ErrProtocol, Msg: "reply line longer than 64 KiB"}
		}
		return nil, classifyIO(err)
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, &OpError{Kind: ErrProtocol, Msg: fmt.Sprintf("reply line not terminated by CRLF: %.80q", line)}
	}
	return line[:len(line)-2], nil
}

// Info asks the server for "version" and "stats" and keeps the fields worth
// reporting next to the numbers.
func (d memcacheDriver) Info(ctx context.Context, addr string, timeout time.Duration) (map[string]string, error) {
	cn, err := d.Dial(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	c := cn.(*mcConn)
	defer c.Close()
	if err := c.nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	info := map[string]string{}
	c.w.WriteString("version\r\nstats\r\n")
	if err := c.w.Flush(); err != nil {
		return nil, classifyIO(err)
	}
	line, e := c.readLine()
	if e != nil {
		return nil, e
	}
	v, ok := bytes.CutPrefix(line, []byte("VERSION "))
	if !ok {
		// An HTTP server on the port, say: every operation would fail.
		return nil, fmt.Errorf("%s does not speak the memcached protocol: it answered %q to version", addr, trunc(line, 60))
	}
	info["version"] = string(v)
	keep := map[string]bool{"curr_items": true, "bytes": true, "limit_maxbytes": true, "evictions": true,
		"curr_connections": true, "get_hits": true, "get_misses": true, "cmd_get": true, "cmd_set": true, "threads": true}
	for range 1000 { // a stats reply has well under 1000 lines
		line, e := c.readLine()
		if e != nil {
			return info, e
		}
		if bytes.Equal(line, []byte("END")) {
			return info, nil
		}
		f := bytes.Fields(line)
		if len(f) == 3 && bytes.Equal(f[0], []byte("STAT")) && keep[string(f[1])] {
			info[string(f[1])] = string(f[2])
		}
		if !bytes.HasPrefix(line, []byte("STAT ")) {
			return info, nil // ERROR or similar: stats unsupported
		}
	}
	return info, nil
}

// trunc shortens b to at most n bytes, for an error message.
func trunc(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
