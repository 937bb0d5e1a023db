package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client that asks for a large response and reads none of it must not
// hold the handler (and the value it sends) past the write deadline; a
// client that reads gets the whole response, on a connection that goes on
// serving requests after a pause longer than the deadline.
func TestWriteDeadlineFreesHandlersOfClientsThatDoNotRead(t *testing.T) {
	const size = 32 << 20 // far beyond what the socket buffers hold
	body := make([]byte, size)
	returned := make(chan error, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, err := w.Write(body)
		returned <- err
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: withWriteDeadline(h, 2*time.Second)}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	t.Run("never reads", func(t *testing.T) {
		c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetReadBuffer(4096))
		_, err = fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		select {
		case err := <-returned:
			require.Error(t, err, "the write gave up")
		case <-time.After(time.Minute):
			t.Fatal("the handler is still writing to a client that reads nothing")
		}
	})

	t.Run("reads, pauses, reads again", func(t *testing.T) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		for i := 0; i < 2; i++ {
			resp, err := client.Get("http://" + ln.Addr().String() + "/big")
			require.NoError(t, err)
			n, err := io.Copy(io.Discard, resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, int64(size), n)
			require.NoError(t, <-returned)
			if i == 0 {
				time.Sleep(2500 * time.Millisecond) // past the deadline of the first response
			}
		}
	})
}

// Small responses are written by the server after the handler returns, from
// its buffers: a client that sends request after request on one connection
// and reads nothing must still lose the connection once those writes stall,
// not hold it, and its goroutine, for ever.
func TestWriteDeadlineCoversWhatTheServerWritesAfterTheHandler(t *testing.T) {
	body := make([]byte, 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := make(chan struct{}, 1)
	srv := &http.Server{Handler: withWriteDeadline(h, time.Second), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadBuffer(4096))
	go func() {
		// Far more replies than the socket buffers hold; bounded in count
		// and time, and ended by the server closing the connection.
		_ = c.SetWriteDeadline(time.Now().Add(time.Minute))
		req := []byte("GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
		for range 100000 {
			if _, err := c.Write(req); err != nil {
				return
			}
		}
	}()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("the server still holds a connection whose client reads nothing")
	}
}
