package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
)

// fakeAuth accepts one user and password and records every failure.
type fakeAuth struct {
	user, password string
	mu             sync.Mutex
	failures       []failure
}

type failure struct{ remote, user, reason string }

func (f *fakeAuth) Verify(user, password string) bool {
	return user == f.user && password == f.password
}

func (f *fakeAuth) Failed(remote, user, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, failure{remote, user, reason})
}

func (f *fakeAuth) take() []failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.failures
	f.failures = nil
	return out
}

// With --auth-file every endpoint but the open probes needs credentials:
// without them or with wrong ones it is a JSON 401 with a Basic challenge,
// reported to the authenticator with the user (never the password); with
// the right ones the endpoint answers as it would without authentication.
func TestAuthRequiredOnEveryEndpointButProbes(t *testing.T) {
	n := startNode(t)
	auth := &fakeAuth{user: "alice", password: "s3cret"}
	srv := httptest.NewServer(httpapi.New(n.KV(), slog.New(slog.NewTextHandler(io.Discard, nil)),
		httpapi.Options{Auth: auth, Admin: refusingAdmin{kv.ErrNoTransferTarget}}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	jsonCT := "application/json"
	endpoints := []struct{ method, path, body string }{
		{http.MethodGet, "/", ""},
		{http.MethodGet, "/console/console.js", ""},
		{http.MethodGet, "/v1/kv", ""},
		{http.MethodGet, "/v1/kv/k", ""},
		{http.MethodPut, "/v1/kv/k", "v"},
		{http.MethodDelete, "/v1/kv/k", ""},
		{http.MethodGet, "/v1/cluster/digest", ""},
		{http.MethodGet, "/v1/stats", ""},
		{http.MethodGet, "/v1/cluster/members", ""},
		{http.MethodPost, "/v1/cluster/members", `{"name":"n9","peer_addr":"127.0.0.1:9"}`},
		{http.MethodDelete, "/v1/cluster/members/n9", ""},
		{http.MethodPost, "/v1/cluster/transfer-leader", `{}`},
		{http.MethodGet, "/no/such/endpoint", ""}, // 401 first: unauthenticated clients learn no paths
	}
	creds := []struct {
		name       string
		user, pass string
		set        bool
		wantReason string
	}{
		{name: "none", wantReason: "no credentials"},
		{name: "wrong password", user: "alice", pass: "guess", set: true, wantReason: "wrong user or password"},
		{name: "unknown user", user: "mallory", pass: "s3cret", set: true, wantReason: "wrong user or password"},
		{name: "right", user: "alice", pass: "s3cret", set: true},
	}
	for _, ep := range endpoints {
		for _, cr := range creds {
			t.Run(ep.method+" "+ep.path+" "+cr.name, func(t *testing.T) {
				req, err := http.NewRequestWithContext(t.Context(), ep.method, srv.URL+ep.path, strings.NewReader(ep.body))
				require.NoError(t, err)
				req.Header.Set("Content-Type", jsonCT)
				if cr.set {
					req.SetBasicAuth(cr.user, cr.pass)
				}
				r := send(t, c, req)
				fails := auth.take()
				if cr.wantReason == "" {
					require.NotEqual(t, http.StatusUnauthorized, r.status, "body: %s", r.body)
					require.Empty(t, fails)
					return
				}
				expectError(t, r, http.StatusUnauthorized, "unauthorized")
				require.Equal(t, `Basic realm="kvd", charset="UTF-8"`, r.header.Get("WWW-Authenticate"))
				require.Len(t, fails, 1)
				require.Equal(t, cr.user, fails[0].user)
				require.Equal(t, cr.wantReason, fails[0].reason)
				require.NotEmpty(t, fails[0].remote)
				require.NotContains(t, fails[0].remote+fails[0].user+fails[0].reason, "guess")
			})
		}
	}
}

// The health, readiness, version and scrape endpoints stay open: probes
// and Prometheus have no password. So does GET /v1/cluster, the member
// table, which members ask each other for without one. Wrong credentials there are not even
// looked at.
func TestAuthLeavesProbesOpen(t *testing.T) {
	n := startNode(t)
	auth := &fakeAuth{user: "alice", password: "s3cret"}
	srv := httptest.NewServer(httpapi.New(n.KV(), slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.Options{Auth: auth}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	for _, path := range []string{"/healthz", "/readyz", "/v1/version", "/v1/cluster"} {
		for _, hdr := range [][]string{nil, {"Authorization", "Basic bWFsbG9yeTp4"}} {
			r := c.get(path, hdr...)
			require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		}
	}
	// Without Options.Metrics there is no /metrics: a 404, not a 401.
	require.Equal(t, http.StatusNotFound, c.get("/metrics").status)
	require.Empty(t, auth.take())
}

// RequireAuth puts handlers mounted beside the API (the profiler) under
// the same rule, and leaves the open paths open.
func TestRequireAuthWrapsOtherHandlers(t *testing.T) {
	auth := &fakeAuth{user: "alice", password: "s3cret"}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := httpapi.RequireAuth(auth, ok)
	for _, tc := range []struct {
		path string
		set  bool
		want int
	}{
		{"/debug/pprof/", false, http.StatusUnauthorized},
		{"/debug/pprof/", true, http.StatusTeapot},
		{"/healthz", false, http.StatusTeapot},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.set {
			req.SetBasicAuth("alice", "s3cret")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, tc.want, rec.Code, tc.path)
	}
	// Without an authenticator nothing is asked.
	rec := httptest.NewRecorder()
	httpapi.RequireAuth(nil, ok).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
	require.Equal(t, http.StatusTeapot, rec.Code)
}

// send sends a prepared request through c's client.
func send(t *testing.T, c *client, req *http.Request) response {
	t.Helper()
	resp, err := c.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// leaderAt is a directory in which every member is the one at addr.
type leaderAt string

func (l leaderAt) Member(kv.NodeID) (httpapi.MemberInfo, bool) {
	return httpapi.MemberInfo{Name: "lead", HTTPAddr: string(l)}, true
}

// A follower passes an admin request to the leader with the client's
// credentials (the leader checks them too), over the members' scheme and
// through the client the node gave it: HTTPS with the members' CA here.
func TestForwardToLeaderCarriesCredentialsOverTheMembersScheme(t *testing.T) {
	n := startNode(t)
	var got struct {
		sync.Mutex
		authz, forwardedBy string
	}
	leader := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Lock()
		got.authz, got.forwardedBy = r.Header.Get("Authorization"), r.Header.Get("X-Kvd-Forwarded-By")
		got.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"leader":"lead"}`)
	}))
	defer leader.Close()
	auth := &fakeAuth{user: "alice", password: "s3cret"}
	follower := httptest.NewServer(httpapi.New(n.KV(), slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.Options{
		Self: httpapi.MemberInfo{Name: "f"}, Auth: auth, Admin: refusingAdmin{kv.ErrNotLeader},
		Directory: leaderAt(strings.TrimPrefix(leader.URL, "https://")),
		Client:    leader.Client(), Scheme: "https",
	}))
	defer follower.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, follower.URL+"/v1/cluster/transfer-leader", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("alice", "s3cret")
	r := send(t, newClient(t, follower.URL), req)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	got.Lock()
	defer got.Unlock()
	require.Equal(t, req.Header.Get("Authorization"), got.authz)
	require.Equal(t, "f", got.forwardedBy)
}
