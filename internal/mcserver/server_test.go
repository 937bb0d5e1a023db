package mcserver_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/mcproto/ascii"
	"github.com/kvd-project/kvd/internal/mcproto/binary"
	"github.com/kvd-project/kvd/internal/mcserver"
)

// fakeHandler answers with no node behind it: a get of key "slow" waits
// for release before it renders (as a write waits for its log entry),
// every other get hits with the key as its value, and anything else is
// answered OK. A get of "close" is answered and ends the connection, and
// so is a refused request the codec calls the client's fault.
type fakeHandler struct {
	release chan struct{}
	mu      sync.Mutex
	ops     []mcproto.Op // observed, in order
	rejects int
}

func (h *fakeHandler) NewSession(c *mcserver.Conn) mcserver.Session {
	return &fakeSession{h: h, c: c}
}

func (h *fakeHandler) Observe(op mcproto.Op, _ time.Duration) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

type fakeSession struct {
	h *fakeHandler
	c *mcserver.Conn
}

func (s *fakeSession) Handle(req *mcproto.Request) *mcserver.Reply {
	enc, e := s.c.Encoder(), req.Echo
	if req.Op == mcproto.OpQuit {
		return mcserver.Final(nil)
	}
	if req.Op != mcproto.OpGet {
		return mcserver.Final(enc.AppendStatus(nil, e, mcproto.StatusOK, 0))
	}
	key := string(req.Keys[0])
	if key == "slow" {
		return s.c.Pending(func() []byte {
			<-s.h.release
			return enc.AppendEnd(enc.AppendHit(nil, e, []byte(key), 0, []byte("late"), 0), e)
		})
	}
	if key == "close" {
		return mcserver.Final(enc.AppendEnd(nil, e)).ThenClose()
	}
	if key == "barrier" {
		s.c.WaitOwnWrites() // a read waits for this connection's writes
	}
	return mcserver.Final(enc.AppendEnd(enc.AppendHit(nil, e, []byte(key), 0, []byte(key), 0), e))
}

func (s *fakeSession) Rejected(_ *mcproto.Request, perr *mcproto.Error) *mcserver.Reply {
	s.h.mu.Lock()
	s.h.rejects++
	s.h.mu.Unlock()
	if perr.Kind == mcproto.KindClient {
		return mcserver.Final(perr.Reply).ThenClose()
	}
	return mcserver.Final(perr.Reply)
}

func serve(t *testing.T, cfg mcserver.Config) (*fakeHandler, *mcserver.Counters, string) {
	t.Helper()
	h := &fakeHandler{release: make(chan struct{})}
	counters := &mcserver.Counters{}
	srv := mcserver.New(cfg, mcserver.Codecs{Text: ascii.Open, Binary: binary.Open}, h, counters,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(ctx))
		require.NoError(t, <-done)
	})
	return h, counters, ln.Addr().String()
}

func dialRW(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(time.Minute))) // bounds a failure only
	return nc, bufio.NewReader(nc)
}

func readLines(t *testing.T, r *bufio.Reader, n int) []string {
	t.Helper()
	var out []string
	for range n {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		out = append(out, strings.TrimSuffix(line, "\r\n"))
	}
	return out
}

// Replies leave in request order: a final reply pipelined behind a pending
// one waits for it, and a read that asks for the connection's own writes
// waits for them.
func TestRepliesKeepRequestOrder(t *testing.T) {
	h, counters, addr := serve(t, mcserver.Config{MaxConnections: 10, MaxItemSize: 1 << 20})
	nc, r := dialRW(t, addr)
	_, err := nc.Write([]byte("get slow\r\nget fast\r\n"))
	require.NoError(t, err)
	got := make(chan []string, 1)
	go func() { got <- readLines(t, r, 6) }()
	select {
	case lines := <-got:
		t.Fatalf("replies before the pending one was released: %q", lines)
	case <-time.After(50 * time.Millisecond):
	}
	close(h.release)
	assert.Equal(t, []string{"VALUE slow 0 4", "late", "END", "VALUE fast 0 4", "fast", "END"}, <-got)

	_, err = nc.Write([]byte("get barrier\r\nversion\r\nquit\r\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"VALUE barrier 0 7", "barrier", "END", "OK"}, readLines(t, r, 4))
	_, err = r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "quit closes the connection")

	h.mu.Lock()
	assert.Equal(t, []mcproto.Op{mcproto.OpGet, mcproto.OpGet, mcproto.OpGet, mcproto.OpVersion}, h.ops)
	h.mu.Unlock()
	assert.Equal(t, uint64(1), counters.TotalConnections.Load())
	assert.Positive(t, counters.BytesRead.Load())
	assert.Positive(t, counters.BytesWritten.Load())
}

// A codec's refusal goes through the session (which counts it) and is
// answered; one marked Close ends the connection after its reply.
func TestRejectedRequests(t *testing.T) {
	h, _, addr := serve(t, mcserver.Config{MaxConnections: 10, MaxItemSize: 1 << 20})
	nc, r := dialRW(t, addr)
	_, err := nc.Write([]byte("bogus\r\nget a\r\nGET / HTTP/1.1\r\nget b\r\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"ERROR", "VALUE a 0 1", "a", "END"}, readLines(t, r, 4))
	_, err = r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "an HTTP request closes the connection without a reply")
	h.mu.Lock()
	assert.Equal(t, 2, h.rejects)
	h.mu.Unlock()
}

// A session may end the connection after a reply (ThenClose), from Handle
// or Rejected: the requests pipelined behind it are not answered.
func TestSessionClosesAfterReply(t *testing.T) {
	_, _, addr := serve(t, mcserver.Config{MaxConnections: 10, MaxItemSize: 1 << 20})
	for _, tc := range []struct {
		name, req string
		want      []string
	}{
		{"from Handle", "get a\r\nget close\r\nget b\r\n", []string{"VALUE a 0 1", "a", "END", "END"}},
		{"from Rejected", "get a\r\nget " + strings.Repeat("k", 251) + "\r\nget b\r\n",
			[]string{"VALUE a 0 1", "a", "END", "CLIENT_ERROR bad command line format"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, r := dialRW(t, addr)
			_, err := nc.Write([]byte(tc.req))
			require.NoError(t, err)
			assert.Equal(t, tc.want, readLines(t, r, len(tc.want)))
			_, err = r.ReadByte()
			assert.ErrorIs(t, err, io.EOF, "the connection closes after the reply")
		})
	}
}

// The first byte picks the codec: 0x80 is the binary protocol's, and the
// connection goes on in it; any other byte opens a text connection, where
// 0x80 later is just a byte.
func TestFirstBytePicksTheCodec(t *testing.T) {
	_, _, addr := serve(t, mcserver.Config{MaxConnections: 10, MaxItemSize: 1 << 20})
	nc, r := dialRW(t, addr)
	noop := []byte{0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0} // Noop, opaque 9
	for range 2 {
		_, err := nc.Write(noop)
		require.NoError(t, err)
		reply := make([]byte, binary.HeaderLen)
		_, err = io.ReadFull(r, reply)
		require.NoError(t, err)
		assert.Equal(t, []byte{0x81, 0x0a}, reply[:2], "a binary response to the Noop")
		assert.Equal(t, []byte{0, 0}, reply[6:8], "status")
		assert.Equal(t, []byte{0, 0, 0, 9}, reply[12:16], "opaque")
	}

	nc, r = dialRW(t, addr)
	_, err := nc.Write([]byte("get \x80\r\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"VALUE \x80 0 1", "\x80", "END"}, readLines(t, r, 3), "0x80 after the first byte is text")
}

// Past MaxConnections a client gets memcached's words and is closed; it is
// counted as rejected, not served.
func TestTooManyConnections(t *testing.T) {
	_, counters, addr := serve(t, mcserver.Config{MaxConnections: 1, MaxItemSize: 1 << 20})
	nc, r := dialRW(t, addr)
	_, err := nc.Write([]byte("get a\r\n"))
	require.NoError(t, err)
	readLines(t, r, 3)
	_, r2 := dialRW(t, addr)
	assert.Equal(t, []string{"ERROR Too many open connections"}, readLines(t, r2, 1))
	assert.Equal(t, uint64(1), counters.RejectedConnections.Load())
	assert.Equal(t, uint64(1), counters.TotalConnections.Load())
}
