package node

import (
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
)

// A port in use is a clear start-up error, with the stores closed again, so
// that the same data dir can be opened right after (found by the
// robustness harness: Start used to crash with a nil pointer instead), and
// with the expiry sweeper and the disk guard stopped (they start before the
// listeners bind, and used to poll the stopped node for good).
func TestStartFailsCleanlyWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	background := []string{"RunExpirySweeper", "(*SpaceGuard).Run"}
	before := make(map[string]int)
	for _, fn := range background {
		before[fn] = goroutinesIn(fn)
	}
	defer func() {
		for _, fn := range background {
			// They stop on their context's cancel; give them a moment
			// to return, bounded. At most as many as before: an earlier
			// test's node may still have been stopping its own.
			for i := 0; i < 500 && goroutinesIn(fn) > before[fn]; i++ {
				time.Sleep(10 * time.Millisecond)
			}
			require.LessOrEqual(t, goroutinesIn(fn), before[fn], "goroutines in %s after the failed starts", fn)
		}
	}()
	for _, tc := range []struct{ name, memcache, http, want string }{
		{"memcache", taken.Addr().String(), "127.0.0.1:0", "listen memcache"},
		{"http", "127.0.0.1:0", taken.Addr().String(), "listen http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Name, cfg.DataDir, cfg.MemcacheAddr, cfg.HTTPAddr = "n1", dir, tc.memcache, tc.http
			n, err := Start(cfg, logger)
			require.Nil(t, n)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "address already in use")
		})
	}
	// The stores were closed: the data dir opens again.
	cfg := config.Default()
	cfg.Name, cfg.DataDir, cfg.MemcacheAddr, cfg.HTTPAddr = "n1", dir, "127.0.0.1:0", "127.0.0.1:0"
	n, err := Start(cfg, logger)
	require.NoError(t, err)
	require.NoError(t, n.Shutdown(t.Context()))
}

// A lone node listening for peers on a wildcard address (the container
// image's default) publishes its host name, not 0.0.0.0, as the address
// joining members dial: they used to dial themselves.
func TestLoneNodeOnWildcardPeerAddrPublishesItsHostName(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(free.Addr().String())
	require.NoError(t, err)
	require.NoError(t, free.Close())

	cfg := config.Default()
	cfg.Name, cfg.DataDir = "n1", t.TempDir()
	cfg.MemcacheAddr, cfg.HTTPAddr, cfg.PeerAddr = "127.0.0.1:0", "127.0.0.1:0", "0.0.0.0:"+port
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	defer func() { require.NoError(t, n.Shutdown(t.Context())) }()
	require.Eventually(t, func() bool {
		m, ok := n.Member(IDOf("n1"))
		return ok && m.PeerAddr == net.JoinHostPort(host, port)
	}, 30*time.Second, 10*time.Millisecond, "published member: %+v", func() any { m, _ := n.Member(IDOf("n1")); return m }())
}

// An HTTP client that stalls in the middle of its body is cut off by the
// request timeout, and does not hold the graceful shutdown.
func TestStalledHTTPUploadIsCutOff(t *testing.T) {
	cfg := config.Default()
	cfg.Name, cfg.DataDir = "n1", t.TempDir()
	cfg.MemcacheAddr, cfg.HTTPAddr, cfg.PeerAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.RequestTimeout = 300 * time.Millisecond
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.KV().Status().Ready }, 30*time.Second, 5*time.Millisecond)

	nc, err := net.Dial("tcp", n.HTTPAddr())
	require.NoError(t, err)
	defer nc.Close()
	_, err = io.WriteString(nc, "PUT /v1/kv/slow HTTP/1.1\r\nHost: kvd\r\nContent-Length: 10\r\n\r\nabc")
	require.NoError(t, err)
	// The bound is only against a hang; the server answers (or closes)
	// once the request timeout passes.
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(time.Minute)))
	_, err = io.ReadAll(nc)
	require.NoError(t, err, "the server closes the stalled connection")

	require.NoError(t, n.Shutdown(t.Context()))
}

// goroutinesIn counts the goroutines whose stack mentions fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}
