package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// kvd cluster moves on to the next endpoint when one could not take the
// request: a server that is not kvd (a proxy's or web server's HTML error
// page) or a member that cannot reach the leader (503 not_leader). An answer
// in which a member judged the request stays final. A foreign error page
// is quoted only in part, so it does not flood the terminal.
func TestClusterEndpointFailover(t *testing.T) {
	htmlPage := "<html><body>" + strings.Repeat("x", 20000) + "</body></html>"
	kvdErr := func(status int, code, msg string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
		}
	}
	for _, tc := range []struct {
		name      string
		first     http.HandlerFunc
		nextCalls int64  // requests the second (healthy) member gets
		err       string // "" = success
	}{
		{
			name: "html error page",
			first: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(htmlPage))
			},
			nextCalls: 1,
		},
		{
			name:      "member cut off from the leader",
			first:     kvdErr(http.StatusServiceUnavailable, "not_leader", "this node is not the leader and cannot reach it over HTTP"),
			nextCalls: 1,
		},
		{
			name:  "member judged the request",
			first: kvdErr(http.StatusConflict, "member_exists", "member already exists: n4"),
			err:   "409 Conflict: member already exists: n4",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := httptest.NewServer(tc.first)
			defer first.Close()
			var calls atomic.Int64
			next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_ = json.NewEncoder(w).Encode(map[string]any{"cluster_id": "1", "id": "2"})
			}))
			defer next.Close()
			out, _, err := runArgs(t, "cluster", "add", "n4", "127.0.0.1:11294", "--endpoints", first.URL+","+next.URL)
			require.Equal(t, tc.nextCalls, calls.Load())
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Contains(t, out, "--join "+next.URL+"\n")
		})
	}

	// With no member behind it, the error names the foreign answer in brief.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(htmlPage))
	}))
	defer srv.Close()
	_, _, err := runArgs(t, "cluster", "status", "--endpoints", srv.URL)
	require.ErrorContains(t, err, "404 Not Found")
	require.ErrorContains(t, err, "not a kvd answer")
	require.Less(t, len(err.Error()), 600, "the page is quoted in part")
}

// A change sent to a member that then gives no answer within --timeout may
// have been made: kvd cluster says so and does not send it again to the
// next endpoint, where a repeat would fail (remove: 404 for the member just
// removed) or act twice (transfer-leader). A read moves on, and so does a
// change no member received (the connection was refused).
func TestClusterDoesNotResendAChangeWithAnUnknownOutcome(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	var calls atomic.Int64
	next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/cluster":
			_ = json.NewEncoder(w).Encode(map[string]any{"self": "1", "leader": "1", "members": []any{}})
		default:
			_ = json.NewEncoder(w).Encode(map[string]string{"removed": "n3", "leader": "n2"})
		}
	}))
	defer next.Close()
	for _, tc := range []struct {
		args      []string
		endpoints string
		nextCalls int64
		err       string // "" = success
	}{
		{args: []string{"remove", "n3"}, endpoints: slow.URL + "," + next.URL, err: "may have been made"},
		{args: []string{"transfer-leader"}, endpoints: slow.URL + "," + next.URL, err: "may have been made"},
		{args: []string{"status"}, endpoints: slow.URL + "," + next.URL, nextCalls: 1},
		{args: []string{"remove", "n3"}, endpoints: "http://127.0.0.1:1," + next.URL, nextCalls: 1},
	} {
		calls.Store(0)
		args := append([]string{"cluster"}, tc.args...)
		_, _, err := runArgs(t, append(args, "--endpoints", tc.endpoints, "--timeout", "200ms")...)
		require.Equal(t, tc.nextCalls, calls.Load(), "%v", tc.args)
		if tc.err == "" {
			require.NoError(t, err, "%v", tc.args)
			continue
		}
		require.ErrorContains(t, err, tc.err, "%v", tc.args)
		require.ErrorContains(t, err, slow.URL, "%v names the member", tc.args)
	}
}

// A malformed --endpoints entry is refused up front, naming it, rather than
// dialled as some other address (a query string glued before the API path,
// a port that cannot exist, another protocol).
func TestClusterRefusesMalformedEndpoints(t *testing.T) {
	for _, e := range []string{"::1", "http://", "ftp://127.0.0.1:11280", "http://127.0.0.1:11280?x=1", "http://127.0.0.1:11280#f", "http://127.0.0.1:99999", "127.0.0.1:0"} {
		_, _, err := runArgs(t, "cluster", "status", "--endpoints", e, "--timeout", "1s")
		require.ErrorContains(t, err, "--endpoints:", "%q", e)
		require.NotContains(t, err.Error(), "no member answered", "%q is refused before dialling", e)
	}
	// The forms that are accepted: bare host:port, IPv6, https, a path prefix.
	for _, e := range []string{"127.0.0.1:1", "[::1]:1", "https://127.0.0.1:1", "http://127.0.0.1:1/kvd/"} {
		_, _, err := runArgs(t, "cluster", "status", "--endpoints", e, "--timeout", "1s")
		require.ErrorContains(t, err, "no member answered", "%q", e)
	}
}
