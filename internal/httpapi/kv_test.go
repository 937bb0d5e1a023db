package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeyLifecycle(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())

	r := c.put("/v1/kv/greeting?flags=42", "hello")
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)

	r = c.get("/v1/kv/greeting")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "hello", string(r.body))
	require.Equal(t, "42", r.header.Get("X-Kvd-Flags"))
	require.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
	require.Empty(t, r.header.Get("X-Kvd-Expires"), "ttl 0 never expires")
	etag := r.header.Get("ETag")
	require.Regexp(t, `^"[0-9]+"$`, etag)

	r = c.do(http.MethodHead, "/v1/kv/greeting", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.body)
	require.Equal(t, etag, r.header.Get("ETag"))

	r = c.get("/v1/kv/greeting", "If-None-Match", etag)
	require.Equal(t, http.StatusNotModified, r.status)
	r = c.get("/v1/kv/greeting", "If-None-Match", `"1", W/`+etag)
	require.Equal(t, http.StatusNotModified, r.status, "weak comparison applies to If-None-Match")
	r = c.get("/v1/kv/greeting", "If-None-Match", `"999999"`)
	require.Equal(t, http.StatusOK, r.status)

	// Every consistency level reads the write.
	for _, level := range []string{"linearizable", "lease", "local"} {
		r = c.get("/v1/kv/greeting?consistency=" + level)
		require.Equal(t, http.StatusOK, r.status, level)
		require.Equal(t, "hello", string(r.body), level)
	}

	// Flags and TTL as headers; a TTL gives an absolute expiry.
	r = c.put("/v1/kv/greeting", "hi", "X-Kvd-Flags", "7", "X-Kvd-TTL", "100")
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
	r = c.get("/v1/kv/greeting")
	require.Equal(t, "7", r.header.Get("X-Kvd-Flags"))
	exp, err := strconv.ParseInt(r.header.Get("X-Kvd-Expires"), 10, 64)
	require.NoError(t, err)
	require.Greater(t, exp, int64(1_000_000_000), "relative ttl becomes an absolute Unix time")
	require.NotEqual(t, etag, r.header.Get("ETag"), "a write changes the CAS token")

	// A negative ttl stores an already-expired item, as memcached does.
	r = c.put("/v1/kv/gone?ttl=-1", "x")
	require.Equal(t, http.StatusNoContent, r.status)
	expectError(t, c.get("/v1/kv/gone"), http.StatusNotFound, "not_found")

	// An empty value is a value.
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/empty", "").status)
	r = c.get("/v1/kv/empty")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.body)

	r = c.do(http.MethodDelete, "/v1/kv/greeting", nil)
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
	expectError(t, c.do(http.MethodDelete, "/v1/kv/greeting", nil), http.StatusNotFound, "not_found")
	expectError(t, c.get("/v1/kv/greeting"), http.StatusNotFound, "not_found")
	require.Equal(t, http.StatusNotFound, c.do(http.MethodHead, "/v1/kv/greeting", nil).status)
}

func TestConditionalPut(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	etagOf := func(key string) string {
		t.Helper()
		r := c.get("/v1/kv/" + key)
		require.Equal(t, http.StatusOK, r.status)
		return r.header.Get("ETag")
	}

	// If-None-Match: * is memcached's add.
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/k", "v1", "If-None-Match", "*").status)
	expectError(t, c.put("/v1/kv/k", "v2", "If-None-Match", "*"), http.StatusPreconditionFailed, "precondition_failed")

	// If-Match: "<cas>" is cas.
	tag := etagOf("k")
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/k", "v2", "If-Match", tag).status)
	expectError(t, c.put("/v1/kv/k", "v3", "If-Match", tag), http.StatusPreconditionFailed, "cas_mismatch")
	require.Equal(t, "v2", string(c.get("/v1/kv/k").body), "a failed cas changes nothing")
	// A bare number works too (curl users).
	bare := strings.Trim(etagOf("k"), `"`)
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/k", "v4", "If-Match", bare).status)
	expectError(t, c.put("/v1/kv/missing", "v", "If-Match", tag), http.StatusPreconditionFailed, "precondition_failed")

	// If-Match: * is replace.
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/k", "v5", "If-Match", "*").status)
	expectError(t, c.put("/v1/kv/missing", "v", "If-Match", "*"), http.StatusPreconditionFailed, "precondition_failed")
	expectError(t, c.get("/v1/kv/missing"), http.StatusNotFound, "not_found")
	require.Equal(t, "v5", string(c.get("/v1/kv/k").body))
}

func TestKeysArePercentDecoded(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	for _, key := range []string{"a/b//c", "../x", "ключ", "q?x=1#f", "%41", strings.Repeat("k", 250), "\xff\xfe"} {
		path := "/v1/kv/" + url.PathEscape(key)
		r := c.put(path, "v:"+key)
		require.Equal(t, http.StatusNoContent, r.status, "key %q: %s", key, r.body)
		r = c.get(path)
		require.Equal(t, http.StatusOK, r.status, "key %q", key)
		require.Equal(t, "v:"+key, string(r.body))
	}
	// Slashes need no escaping: the rest of the path is the key.
	require.Equal(t, "v:a/b//c", string(c.get("/v1/kv/a/b//c").body))
}

func TestList(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	var want []string
	for i := range 25 {
		k := fmt.Sprintf("user:%02d", i)
		want = append(want, k)
		require.Equal(t, http.StatusNoContent, c.put("/v1/kv/"+k+"?flags="+strconv.Itoa(i), strings.Repeat("x", i)).status)
	}
	for _, k := range []string{"other", "user", "usex"} {
		require.Equal(t, http.StatusNoContent, c.put("/v1/kv/"+k, "v").status)
	}
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/user:zz?ttl=-1", "expired").status)
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/user:%FF", "binary").status)

	type item struct {
		Key       string
		KeyBase64 []byte `json:"key_base64"`
		Flags     uint32
		CAS       uint64
		Expires   int64
		Size      int
	}
	type page struct {
		Items     []item
		Truncated bool
		Next      string
	}
	list := func(path string) page {
		t.Helper()
		r := c.get(path)
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		var p page
		require.NoError(t, json.Unmarshal(r.body, &p))
		return p
	}

	// Walk the prefix in pages of 10 by following next.
	var got []string
	path := "/v1/kv?prefix=user:&limit=10"
	pages := 0
	for {
		p := list(path)
		pages++
		for _, it := range p.Items {
			if it.KeyBase64 != nil {
				got = append(got, string(it.KeyBase64))
				continue
			}
			got = append(got, it.Key)
			var i int
			_, err := fmt.Sscanf(it.Key, "user:%02d", &i)
			require.NoError(t, err)
			require.Equal(t, uint32(i), it.Flags)
			require.Equal(t, i, it.Size)
			require.NotZero(t, it.CAS)
		}
		if !p.Truncated {
			require.Empty(t, p.Next)
			break
		}
		require.NotEmpty(t, p.Next)
		path = p.Next
	}
	require.Equal(t, append(want, "user:\xff"), got, "byte order, expired hidden, non-UTF-8 key in key_base64")
	require.Equal(t, 3, pages)

	p := list("/v1/kv?prefix=user:&after=user:22")
	require.Len(t, p.Items, 3)
	require.Equal(t, "user:23", p.Items[0].Key)

	p = list("/v1/kv?limit=2&consistency=local")
	require.Equal(t, []string{"other", "user"}, []string{p.Items[0].Key, p.Items[1].Key})
	require.True(t, p.Truncated)
	require.Contains(t, p.Next, "consistency=local")

	p = list("/v1/kv?prefix=nothing")
	require.NotNil(t, p.Items, "an empty listing is [], not null")
	require.Empty(t, p.Items)
	require.False(t, p.Truncated)

	r := c.get("/v1/kv?prefix=nothing")
	require.Contains(t, string(r.body), `"items":[]`)
}

func TestBadInput(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/exists", "v").status)
	big := strings.Repeat("x", 1<<10+1)
	cases := []struct {
		name   string
		method string
		path   string
		body   io.Reader
		hdr    []string
		status int
		code   string
	}{
		{"key too long", "PUT", "/v1/kv/" + strings.Repeat("k", 251), nil, nil, 400, "bad_key"},
		{"key with a space", "PUT", "/v1/kv/a%20b", nil, nil, 400, "bad_key"},
		// PUT creates keys by memcached's documented rule; reads and deletes
		// reach any key the memcache port stores (TestKeysTheMemcachePortStores).
		{"key with NUL", "PUT", "/v1/kv/a%00b", nil, nil, 400, "bad_key"},
		{"key with newline", "DELETE", "/v1/kv/a%0Ab", nil, nil, 400, "bad_key"},
		{"key with DEL", "PUT", "/v1/kv/a%7Fb", nil, nil, 400, "bad_key"},
		{"read a key with a space", "GET", "/v1/kv/a%20b", nil, nil, 400, "bad_key"},
		{"empty key", "PUT", "/v1/kv/", nil, nil, 400, "bad_key"},
		{"flags not a number", "PUT", "/v1/kv/k?flags=abc", nil, nil, 400, "bad_flags"},
		{"flags negative", "PUT", "/v1/kv/k?flags=-1", nil, nil, 400, "bad_flags"},
		{"flags over 32 bits", "PUT", "/v1/kv/k?flags=4294967296", nil, nil, 400, "bad_flags"},
		{"flags empty", "PUT", "/v1/kv/k?flags=", nil, nil, 400, "bad_flags"},
		{"flags header bad", "PUT", "/v1/kv/k", nil, []string{"X-Kvd-Flags", "x"}, 400, "bad_flags"},
		{"flags header and query disagree", "PUT", "/v1/kv/k?flags=1", nil, []string{"X-Kvd-Flags", "2"}, 400, "bad_flags"},
		{"ttl fractional", "PUT", "/v1/kv/k?ttl=1.5", nil, nil, 400, "bad_ttl"},
		{"ttl header bad", "PUT", "/v1/kv/k", nil, []string{"X-Kvd-TTL", "soon"}, 400, "bad_ttl"},
		{"unknown parameter", "PUT", "/v1/kv/k?tll=5", nil, nil, 400, "bad_request"},
		{"parameter on delete", "DELETE", "/v1/kv/k?flags=1", nil, nil, 400, "bad_request"},
		{"repeated parameter", "PUT", "/v1/kv/k?flags=1&flags=2", nil, nil, 400, "bad_request"},
		{"bad query encoding", "PUT", "/v1/kv/k?flags=%zz", nil, nil, 400, "bad_request"},
		{"bad consistency", "GET", "/v1/kv/k?consistency=eventual", nil, nil, 400, "bad_consistency"},
		{"empty consistency", "GET", "/v1/kv/k?consistency=", nil, nil, 400, "bad_consistency"},
		{"weak If-Match", "PUT", "/v1/kv/k", nil, []string{"If-Match", `W/"1"`}, 412, "precondition_failed"},
		{"two If-Match tokens", "PUT", "/v1/kv/k", nil, []string{"If-Match", `"1", "2"`}, 400, "bad_precondition"},
		{"If-Match a foreign tag", "PUT", "/v1/kv/k", nil, []string{"If-Match", `"abc"`}, 412, "precondition_failed"},
		{"If-Match garbage", "PUT", "/v1/kv/k", nil, []string{"If-Match", `abc`}, 400, "bad_precondition"},
		{"If-None-Match with a tag on PUT", "PUT", "/v1/kv/k", nil, []string{"If-None-Match", `"5"`}, 400, "bad_precondition"},
		{"both preconditions", "PUT", "/v1/kv/k", nil, []string{"If-Match", "*", "If-None-Match", "*"}, 400, "bad_precondition"},
		{"conditional delete", "DELETE", "/v1/kv/exists", nil, []string{"If-Match", `"1"`}, 400, "bad_precondition"},
		{"If-None-Match garbage on GET", "GET", "/v1/kv/exists", nil, []string{"If-None-Match", "nope"}, 400, "bad_precondition"},
		{"list limit zero", "GET", "/v1/kv?limit=0", nil, nil, 400, "bad_limit"},
		{"list limit too big", "GET", "/v1/kv?limit=1001", nil, nil, 400, "bad_limit"},
		{"list limit not a number", "GET", "/v1/kv?limit=ten", nil, nil, 400, "bad_limit"},
		{"list prefix with a space", "GET", "/v1/kv?prefix=a%20b", nil, nil, 400, "bad_key"},
		{"list after too long", "GET", "/v1/kv?after=" + strings.Repeat("k", 251), nil, nil, 400, "bad_key"},
		{"list unknown parameter", "GET", "/v1/kv?pefix=a", nil, nil, 400, "bad_request"},
		{"cluster parameter", "GET", "/v1/cluster?verbose=1", nil, nil, 400, "bad_request"},
		{"healthz parameter", "GET", "/healthz?verbose=1", nil, nil, 400, "bad_request"},
		{"healthz bad query encoding", "GET", "/healthz?%zz", nil, nil, 400, "bad_request"},
		{"readyz parameter", "GET", "/readyz?verbose=1", nil, nil, 400, "bad_request"},
		{"stats parameter", "GET", "/v1/stats?x=1", nil, nil, 400, "bad_request"},
		{"members parameter", "GET", "/v1/cluster/members?x=1", nil, nil, 400, "bad_request"},
		{"digest parameter", "GET", "/v1/cluster/digest?x=1", nil, nil, 400, "bad_request"},
		// The body alone would be a 404 (no such member): the 400 is the query's.
		{"parameter on transfer-leader", "POST", "/v1/cluster/transfer-leader?to=n1", strings.NewReader(`{"to":"nobody"}`), []string{"Content-Type", "application/json"}, 400, "bad_request"},
		{"misspelt force", "DELETE", "/v1/cluster/members/nobody?forse=true", nil, nil, 400, "bad_request"},
		{"repeated force", "DELETE", "/v1/cluster/members/nobody?force=true&force=false", nil, nil, 400, "bad_request"},
		{"force without a value", "DELETE", "/v1/cluster/members/nobody?force", nil, nil, 400, "bad_request"},
		{"force empty", "DELETE", "/v1/cluster/members/nobody?force=", nil, nil, 400, "bad_request"},
		// Partial content stored as the whole value would corrupt it (RFC 9110: a 400).
		{"partial PUT", "PUT", "/v1/kv/k", strings.NewReader("x"), []string{"Content-Range", "bytes 0-0/2"}, 400, "bad_request"},
		{"value too large", "PUT", "/v1/kv/k", strings.NewReader(big), nil, 413, "too_large"},
		// An io.Reader of unknown length is sent chunked: MaxBytesReader catches it.
		{"chunked value too large", "PUT", "/v1/kv/k", io.MultiReader(strings.NewReader(big)), nil, 413, "too_large"},
		{"POST a key", "POST", "/v1/kv/k", nil, nil, 405, "method_not_allowed"},
		{"PATCH a key", "PATCH", "/v1/kv/k", nil, nil, 405, "method_not_allowed"},
		{"DELETE the listing", "DELETE", "/v1/kv", nil, nil, 405, "method_not_allowed"},
		{"PUT cluster", "PUT", "/v1/cluster", nil, nil, 405, "method_not_allowed"},
		{"POST healthz", "POST", "/healthz", nil, nil, 405, "method_not_allowed"},
		{"DELETE metrics", "DELETE", "/metrics", nil, nil, 405, "method_not_allowed"},
		{"unknown path", "GET", "/v2/kv/k", nil, nil, 404, "not_found"},
		{"unknown path under v1", "GET", "/v1/nothing", nil, nil, 404, "not_found"},
		{"missing key", "GET", "/v1/kv/nope", nil, nil, 404, "not_found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, c.base)
			r := c.do(tc.method, tc.path, tc.body, tc.hdr...)
			expectError(t, r, tc.status, tc.code)
			if tc.status == http.StatusMethodNotAllowed {
				require.NotEmpty(t, r.header.Get("Allow"))
			}
		})
	}
	require.Equal(t, "v", string(c.get("/v1/kv/exists").body), "no rejected request changed anything")
	expectError(t, c.get("/v1/kv/k"), http.StatusNotFound, "not_found")
	require.Equal(t, "GET, PUT, DELETE, HEAD", c.do("POST", "/v1/kv/k", nil).header.Get("Allow"))

	// A request line net/http cannot parse never reaches the handler; it
	// still gets a 400 (plain text, from net/http), never a 500.
	conn, err := net.Dial("tcp", n.HTTPAddr())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /v1/kv/%zz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestClusterAndHealth(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())

	r := c.get("/healthz")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"status":"ok"}`, string(r.body))

	r = c.get("/readyz")
	require.Equal(t, http.StatusOK, r.status)
	var ready map[string]any
	require.NoError(t, json.Unmarshal(r.body, &ready))
	require.Equal(t, true, ready["ready"])
	require.Equal(t, true, ready["leader"])

	r = c.get("/v1/cluster")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var cs struct {
		Self, Leader          string
		HasLeader             bool `json:"has_leader"`
		Ready                 bool
		Term, Commit, Applied uint64
		LeaderChanges         uint64 `json:"leader_changes"`
		Members               []map[string]any
	}
	require.NoError(t, json.Unmarshal(r.body, &cs))
	require.NotEmpty(t, cs.Self)
	require.Equal(t, cs.Self, cs.Leader)
	require.True(t, cs.HasLeader)
	require.True(t, cs.Ready)
	require.GreaterOrEqual(t, cs.Term, uint64(1))
	require.Positive(t, cs.Applied)
	require.GreaterOrEqual(t, cs.LeaderChanges, uint64(1))
	require.Len(t, cs.Members, 1)
	m := cs.Members[0]
	require.Equal(t, cs.Self, m["id"])
	require.Equal(t, "n1", m["name"])
	require.Equal(t, n.HTTPAddr(), m["http_addr"])
	require.Equal(t, n.MemcacheAddr(), m["memcache_addr"])
	require.Equal(t, "voter", m["kind"])
	require.Equal(t, "leader", m["role"])
	require.Equal(t, true, m["self"])
	require.Equal(t, "healthy", m["health"])

	r = c.get("/v1/stats")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var st struct {
		TimeMs  int64 `json:"time_ms"`
		Name    string
		Storage struct{ Items int64 }
		Totals  *struct {
			HTTPRequests uint64 `json:"http_requests"`
		}
	}
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.Equal(t, "n1", st.Name)
	require.NotNil(t, st.Totals)
	require.Positive(t, st.TimeMs)

	// These take any query (scrapers and browsers add their own); the
	// endpoints that take none are in TestBadInput.
	for _, path := range []string{"/metrics?name=kvd_raft_term", "/?v=2"} {
		r = c.get(path)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
	}
}

func TestConsoleAssets(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	r := c.get("/")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
	require.Contains(t, r.header.Get("Content-Security-Policy"), "default-src 'self'", "no inline script can run")
	require.Contains(t, string(r.body), `<script src="/console/console.js"`)
	for path, ctype := range map[string]string{"/console/console.js": "text/javascript", "/console/console.css": "text/css"} {
		r = c.get(path)
		require.Equal(t, http.StatusOK, r.status, path)
		require.Contains(t, r.header.Get("Content-Type"), ctype)
		require.NotEmpty(t, r.body)
	}
	// The console writes server data as text only.
	js := string(c.get("/console/console.js").body)
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		require.NotContains(t, js, sink)
	}
	expectError(t, c.do(http.MethodPost, "/", nil), http.StatusMethodNotAllowed, "method_not_allowed")
}
