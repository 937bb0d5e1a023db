package httpapi_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
)

// faulty is a real node's service with failures injected: a single healthy
// node cannot lose its quorum or time out on demand.
type faulty struct {
	httpapi.Service
	notReady   bool
	doErr      error
	barrierErr error
	listErr    error
	localReads bool // as if started with --read-consistency local
}

func (f *faulty) Config() kv.Config {
	c := f.Service.Config()
	if f.localReads {
		c.ReadConsistency = kv.Local
	}
	return c
}

func (f *faulty) Status() kv.ReplicaStatus {
	st := f.Service.Status()
	if f.notReady {
		st.Ready, st.Leader = false, 0
	}
	return st
}

func (f *faulty) Do(ctx context.Context, c *command.Command) (kv.Result, error) {
	if f.doErr != nil {
		return kv.Result{}, f.doErr
	}
	return f.Service.Do(ctx, c)
}

func (f *faulty) Barrier(ctx context.Context, level kv.Consistency) error {
	if f.barrierErr != nil && level != kv.Local {
		return f.barrierErr
	}
	return f.Service.Barrier(ctx, level)
}

func (f *faulty) List(ctx context.Context, level kv.Consistency, prefix, after []byte, limit int) ([]kv.ScanItem, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	return f.Service.List(ctx, level, prefix, after, limit)
}

func TestUnavailable(t *testing.T) {
	n := startNode(t)
	f := &faulty{Service: n.KV()}
	srv := httptest.NewServer(httpapi.New(f, slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.Options{}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/k", "v").status)

	expect503 := func(r response, code string) string {
		t.Helper()
		msg := expectError(t, r, http.StatusServiceUnavailable, code)
		require.Equal(t, "1", r.header.Get("Retry-After"))
		return msg
	}

	t.Run("not ready", func(t *testing.T) {
		*f = faulty{Service: n.KV(), notReady: true}
		r := c.get("/readyz")
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		require.Contains(t, string(r.body), `"ready":false`)
		require.Equal(t, http.StatusOK, c.get("/healthz").status, "alive even when not ready")
		expect503(c.put("/v1/kv/k", "v2"), "not_ready")
		expect503(c.do(http.MethodDelete, "/v1/kv/k", nil), "not_ready")
		expect503(c.get("/v1/kv/k"), "not_ready")
		expect503(c.get("/v1/kv?prefix=k"), "not_ready")
		// Local reads are explicitly allowed to be stale.
		r = c.get("/v1/kv/k?consistency=local")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "v", string(r.body))
		r = c.get("/v1/cluster")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, string(r.body), `"health":"unhealthy"`)
		require.Contains(t, string(r.body), `"has_leader":false`)
	})

	writeErrs := []struct {
		err  error
		code string
	}{
		{kv.ErrNoLeader, "no_leader"},
		{kv.ErrTimeout, "timeout"},
		{kv.ErrUnknownOutcome, "unknown_outcome"},
		{kv.ErrBusy, "busy"},
		{kv.ErrStopped, "shutting_down"},
		{kv.ErrNotReady, "not_ready"},
	}
	for _, we := range writeErrs {
		t.Run("write "+we.code, func(t *testing.T) {
			*f = faulty{Service: n.KV(), doErr: we.err}
			msg := expect503(c.put("/v1/kv/k", "v2"), we.code)
			if we.code == "unknown_outcome" {
				require.Contains(t, msg, "may have been applied")
			}
			expect503(c.do(http.MethodDelete, "/v1/kv/k", nil), we.code)
		})
	}
	t.Run("read no leader", func(t *testing.T) {
		*f = faulty{Service: n.KV(), barrierErr: kv.ErrNoLeader}
		expect503(c.get("/v1/kv/k"), "no_leader")
		expect503(c.get("/v1/kv/k?consistency=lease"), "no_leader")
		require.Equal(t, http.StatusOK, c.get("/v1/kv/k?consistency=local").status)
	})
	t.Run("read default is the node's", func(t *testing.T) {
		*f = faulty{Service: n.KV(), barrierErr: kv.ErrNoLeader, localReads: true}
		require.Equal(t, http.StatusOK, c.get("/v1/kv/k").status, "--read-consistency local: no barrier")
		require.Equal(t, http.StatusOK, c.get("/v1/kv?prefix=k").status)
		expect503(c.get("/v1/kv/k?consistency=linearizable"), "no_leader")
	})
	t.Run("read timeout", func(t *testing.T) {
		*f = faulty{Service: n.KV(), barrierErr: kv.ErrTimeout}
		expect503(c.get("/v1/kv/k"), "timeout")
	})
	t.Run("list timeout", func(t *testing.T) {
		*f = faulty{Service: n.KV(), listErr: kv.ErrTimeout}
		expect503(c.get("/v1/kv"), "timeout")
	})
	t.Run("server fault is a 500", func(t *testing.T) {
		*f = faulty{Service: n.KV(), doErr: errors.New("disk on fire")}
		r := c.put("/v1/kv/k", "v2")
		msg := expectError(t, r, http.StatusInternalServerError, "internal")
		require.False(t, strings.Contains(msg, "fire"), "internal details stay in the log")
	})
	*f = faulty{Service: n.KV()}
	require.Equal(t, "v", string(c.get("/v1/kv/k").body), "no failed write was applied")

	// Without metrics there is no /metrics.
	expectError(t, c.get("/metrics"), http.StatusNotFound, "not_found")
}

// An admin body is one JSON object and nothing more: trailing bytes are a
// malformed body, not ignored.
func TestAdminBodyIsOneJSONObject(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	for _, body := range []string{`{"to":"nobody"} trailing`, `{"to":"nobody"}{"to":"n1"}`, `{"to":"nobody"`} {
		r := c.do(http.MethodPost, "/v1/cluster/transfer-leader", strings.NewReader(body), "Content-Type", "application/json")
		expectError(t, r, http.StatusBadRequest, "bad_json")
	}
	r := c.do(http.MethodPost, "/v1/cluster/transfer-leader", strings.NewReader(`{"to":"nobody"} `+"\n"), "Content-Type", "application/json")
	msg := expectError(t, r, http.StatusNotFound, "not_found")
	require.Contains(t, msg, `"nobody"`, "the unknown member is named as typed")
}

// A member's addresses are checked before anything is proposed.
func TestAddMemberChecksItsPort(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	for _, addr := range []string{"[::1]:99999", "h:0", "h:x", "h"} {
		body := `{"name":"n9","peer_addr":"` + addr + `"}`
		r := c.do(http.MethodPost, "/v1/cluster/members", strings.NewReader(body), "Content-Type", "application/json")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", addr, r.body)
	}
	require.Len(t, n.KV().Status().Learners, 0)
}
