package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/node"
)

// startNode runs a real single-member kvd node on loopback ports with its
// data in a temporary directory, and waits until it is ready.
func startNode(t *testing.T) *node.Node {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "n1"
	cfg.DataDir = t.TempDir()
	cfg.MemcacheAddr, cfg.HTTPAddr, cfg.PeerAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.MaxItemSize = 1 << 10 // small, so the 413 tests stay cheap
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(cfg, logger)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
	})
	waitReady(t, n)
	return n
}

// waitReady polls the node's readiness; a node that never becomes ready
// fails through the test binary's -timeout.
func waitReady(t *testing.T, n *node.Node) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !n.KV().Status().Ready {
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal("test ended before the node was ready")
		}
	}
}

// client talks to one base URL without following redirects.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newClient(t *testing.T, base string) *client {
	return &client{t: t, base: base, hc: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// errBody decodes a JSON error, failing the test if it is not one.
func (r response) errBody(t *testing.T) (msg, code string) {
	t.Helper()
	require.Equal(t, "application/json", r.header.Get("Content-Type"), "body: %s", r.body)
	var e struct{ Error, Code string }
	require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
	require.NotEmpty(t, e.Error)
	require.NotEmpty(t, e.Code)
	return e.Error, e.Code
}

func (c *client) do(method, path string, body io.Reader, hdr ...string) response {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, body)
	require.NoError(c.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (c *client) put(path, value string, hdr ...string) response {
	c.t.Helper()
	return c.do(http.MethodPut, path, strings.NewReader(value), hdr...)
}

func (c *client) get(path string, hdr ...string) response {
	c.t.Helper()
	return c.do(http.MethodGet, path, nil, hdr...)
}

// expectError checks a JSON error response's status and code.
func expectError(t *testing.T, r response, status int, code string) string {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	msg, got := r.errBody(t)
	require.Equal(t, code, got, "message: %s", msg)
	return msg
}
