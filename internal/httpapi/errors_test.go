package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
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

func (f *faulty) Do(ctx context.Context, c *command.Command) (command.Result, error) {
	if f.doErr != nil {
		return command.Result{}, f.doErr
	}
	return f.Service.Do(ctx, c)
}

func (f *faulty) Barrier(ctx context.Context, level kv.Consistency) error {
	if f.barrierErr != nil && level != kv.Local {
		return f.barrierErr
	}
	return f.Service.Barrier(ctx, level)
}

func (f *faulty) List(ctx context.Context, level kv.Consistency, prefix, after []byte, limit int) ([]command.ScanItem, error) {
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
		require.Equal(t, "1", r.header.Get("Retry-After"), "like every other 503")
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

// A web page can send a POST to any address without asking first (no CORS
// preflight) when its body is text/plain, a form or nothing. The cluster
// endpoints take application/json only, which a browser must ask for, and
// kvd never grants; and they refuse whatever a browser marks cross-site.
func TestAdminRefusesWhatAWebPageCanSend(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	member := `{"name":"evil","peer_addr":"127.0.0.1:9"}`
	crossSite := []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		code                     string
	}{
		{"text/plain from another site", "POST", "/v1/cluster/members", member,
			append([]string{"Content-Type", "text/plain"}, crossSite...), 403, "cross_site"},
		{"text/plain", "POST", "/v1/cluster/members", member, []string{"Content-Type", "text/plain;charset=UTF-8"}, 415, "unsupported_media_type"},
		{"form", "POST", "/v1/cluster/members", "name=evil&peer_addr=127.0.0.1:9",
			[]string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"multipart form", "POST", "/v1/cluster/transfer-leader", "--b--\r\n", []string{"Content-Type", "multipart/form-data; boundary=b"}, 415, "unsupported_media_type"},
		{"no Content-Type, no body", "POST", "/v1/cluster/transfer-leader", "", nil, 415, "unsupported_media_type"},
		{"no Content-Type", "POST", "/v1/cluster/transfer-leader", `{"to":""}`, nil, 415, "unsupported_media_type"},
		{"malformed Content-Type", "POST", "/v1/cluster/transfer-leader", `{"to":""}`, []string{"Content-Type", "application/json; ="}, 415, "unsupported_media_type"},
		{"JSON from another site", "POST", "/v1/cluster/transfer-leader", `{"to":""}`,
			append([]string{"Content-Type", "application/json"}, crossSite...), 403, "cross_site"},
		{"remove from another site", "DELETE", "/v1/cluster/members/n1?force=true", "", crossSite, 403, "cross_site"},
		// Accepted, and judged: there is no such member.
		{"JSON with a charset", "POST", "/v1/cluster/transfer-leader", `{"to":"nobody"}`,
			[]string{"Content-Type", "application/json; charset=utf-8"}, 404, "not_found"},
		{"JSON in capitals", "POST", "/v1/cluster/transfer-leader", `{"to":"nobody"}`, []string{"Content-Type", "Application/JSON"}, 404, "not_found"},
		{"JSON from the console's own page", "POST", "/v1/cluster/transfer-leader", `{"to":"nobody"}`,
			[]string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-origin"}, 404, "not_found"},
		{"remove from the console's own page", "DELETE", "/v1/cluster/members/nobody", "", []string{"Sec-Fetch-Site", "same-origin"}, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(tc.method, tc.path, strings.NewReader(tc.body), tc.hdr...)
			expectError(t, r, tc.status, tc.code)
		})
	}
	st := n.KV().Status()
	require.Empty(t, st.Learners, "no member was added")
	require.Len(t, st.Voters, 1, "no member was removed")
}

// The key-value API has no write a page can send without a preflight: PUT
// and DELETE always need one, kvd answers none (no Access-Control-Allow-*
// header), and POST, which a form can send, is not a method of a key.
func TestKVHasNoCrossSiteSimpleWrite(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b"} {
		r := c.do(http.MethodPost, "/v1/kv/k", strings.NewReader("v"), "Content-Type", ct, "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site")
		expectError(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
	}
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		r := c.do(http.MethodOptions, "/v1/kv/k", nil, "Origin", "http://evil.example", "Access-Control-Request-Method", method)
		require.GreaterOrEqual(t, r.status, 400, "preflight for %s: %s", method, r.body)
		for h := range r.header {
			require.False(t, strings.HasPrefix(h, "Access-Control-"), "preflight for %s granted %s", method, h)
		}
	}
	expectError(t, c.get("/v1/kv/k"), http.StatusNotFound, "not_found")
}

// A member name follows config.CheckName, the rule of --name and
// --initial-cluster: no member can be added that could not be named again.
func TestAddMemberChecksItsName(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	for _, name := range []string{"", "rack1/n9", "n,9", "n=9", "n 9", "n\t9", "n\u00a09", "n\x009", "n\x1b9"} {
		body, err := json.Marshal(httpapi.MemberInfo{Name: name, PeerAddr: "127.0.0.1:9"})
		require.NoError(t, err)
		r := c.do(http.MethodPost, "/v1/cluster/members", bytes.NewReader(body), "Content-Type", "application/json")
		msg := expectError(t, r, http.StatusBadRequest, "bad_request")
		require.Contains(t, msg, "name", "%q", name)
	}
	require.Empty(t, n.KV().Status().Learners)
}

// DELETE looks up any name that unescapes, '/' included (%2F), so that a
// member named before the name rule can still be removed; a raw '/' is a
// wrong path.
func TestRemoveMemberPath(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	expectError(t, c.do(http.MethodDelete, "/v1/cluster/members/rack1%2Fn9", nil), http.StatusNotFound, "not_found")
	expectError(t, c.do(http.MethodDelete, "/v1/cluster/members/rack1/n9", nil), http.StatusBadRequest, "bad_request")
	expectError(t, c.do(http.MethodDelete, "/v1/cluster/members/", nil), http.StatusBadRequest, "bad_request")
}

// refusingAdmin is a leader that refuses every membership operation with
// err: a passing state, such as a leadership transfer or another change
// still unapplied, in which raft takes no membership change.
type refusingAdmin struct{ err error }

func (a refusingAdmin) AddMember(context.Context, httpapi.MemberInfo) (httpapi.JoinInfo, error) {
	return httpapi.JoinInfo{}, a.err
}
func (a refusingAdmin) RemoveMember(context.Context, string, bool) error { return a.err }
func (a refusingAdmin) TransferLeader(context.Context, string) (httpapi.MemberInfo, error) {
	return httpapi.MemberInfo{}, a.err
}
func (refusingAdmin) Healthy() map[kv.NodeID]bool { return nil }

// A change refused while a leadership transfer or another change is in
// progress is a 503 to retry: the first was a 400, which `kvd serve --join`
// takes as final, and the second a timeout after the whole request's time.
func TestAdminChangeRefusedForNowIsRetryable(t *testing.T) {
	n := startNode(t)
	for _, tc := range []struct {
		err  error
		code string
	}{
		{kv.ErrTransferring, "leader_transfer"},
		{kv.ErrChangeInProgress, "change_in_progress"},
	} {
		srv := httptest.NewServer(httpapi.New(n.KV(), slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.Options{Admin: refusingAdmin{tc.err}}))
		c := newClient(t, srv.URL)
		json := []string{"Content-Type", "application/json"}
		for _, r := range []response{
			c.do(http.MethodPost, "/v1/cluster/members", strings.NewReader(`{"name":"n9","peer_addr":"127.0.0.1:9"}`), json...),
			c.do(http.MethodDelete, "/v1/cluster/members/n9", nil),
			c.do(http.MethodPost, "/v1/cluster/transfer-leader", strings.NewReader(`{"to":"n1"}`), json...),
		} {
			expectError(t, r, http.StatusServiceUnavailable, tc.code)
			require.Equal(t, "1", r.header.Get("Retry-After"))
		}
		srv.Close()
	}
}

// A witness refuses every data request with 421 and the sentence naming
// the data members, and answers the rest (health, cluster, version).
func TestWitnessRefusesDataRequests(t *testing.T) {
	n := startNode(t)
	const why = "this member is a witness and holds no data: send data requests to a data member: n1 (h:1)"
	srv := httptest.NewServer(httpapi.New(n.KV(), slog.New(slog.NewTextHandler(io.Discard, nil)),
		httpapi.Options{Witness: func() string { return why }}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	for _, r := range []response{
		c.get("/v1/kv/k"),
		c.put("/v1/kv/k", "v"),
		c.do(http.MethodDelete, "/v1/kv/k", nil),
		c.get("/v1/kv?prefix=k"),
		c.get("/v1/kv/a%2Fb?consistency=local"),
	} {
		require.Equal(t, why, expectError(t, r, http.StatusMisdirectedRequest, "witness"))
	}
	for _, path := range []string{"/healthz", "/v1/cluster", "/v1/version"} {
		require.Equal(t, http.StatusOK, c.get(path).status, path)
	}
}
