package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// RFC 9110 13.1.1: an origin server MUST evaluate If-Match before
// performing the method, GET and HEAD included: a client that asks for the
// version it holds must get a 412, not silently a newer one. A response that
// would not be a 2xx without the precondition (a 404) ignores it (13.2.1).
func TestConditionalGet(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	require.Equal(t, http.StatusNoContent, c.put("/v1/kv/k", "v1").status)
	tag := c.get("/v1/kv/k").header.Get("ETag")
	require.NotEmpty(t, tag)

	cases := []struct {
		name   string
		hdr    []string
		status int
		code   string // for a JSON error
	}{
		{"If-Match the current tag", []string{"If-Match", tag}, http.StatusOK, ""},
		{"If-Match *", []string{"If-Match", "*"}, http.StatusOK, ""},
		{"If-Match a list holding the tag", []string{"If-Match", `"1", ` + tag}, http.StatusOK, ""},
		{"If-Match another tag", []string{"If-Match", `"999999"`}, http.StatusPreconditionFailed, "precondition_failed"},
		// The strong comparison: a weak tag matches nothing (13.1.1).
		{"If-Match weak tag", []string{"If-Match", "W/" + tag}, http.StatusPreconditionFailed, "precondition_failed"},
		// A well-formed tag that no kvd item has (a proxy's "42-gzip")
		// matches nothing; an unquoted word is malformed.
		{"If-Match a foreign tag", []string{"If-Match", `"1-gzip"`}, http.StatusPreconditionFailed, "precondition_failed"},
		{"If-Match garbage", []string{"If-Match", "nope"}, http.StatusBadRequest, "bad_precondition"},
		{"If-None-Match a foreign tag", []string{"If-None-Match", `"1-gzip"`}, http.StatusOK, ""},
		{"If-None-Match the weak form of the tag", []string{"If-None-Match", "W/" + tag}, http.StatusNotModified, ""},
		{"If-None-Match a list with a foreign tag and the tag", []string{"If-None-Match", `"x", ` + tag}, http.StatusNotModified, ""},
		// If-Match holds, so If-None-Match decides (13.2.2).
		{"If-Match and If-None-Match both matching", []string{"If-Match", tag, "If-None-Match", tag}, http.StatusNotModified, ""},
		// If-Match fails first: 412, not 304.
		{"If-Match failing with If-None-Match matching", []string{"If-Match", `"1"`, "If-None-Match", tag}, http.StatusPreconditionFailed, "precondition_failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				r := c.do(method, "/v1/kv/k", nil, tc.hdr...)
				require.Equal(t, tc.status, r.status, "%s: %s", method, r.body)
				if tc.code != "" && method == http.MethodGet {
					expectError(t, r, tc.status, tc.code)
				}
				if tc.status == http.StatusOK && method == http.MethodGet {
					require.Equal(t, "v1", string(r.body))
				}
			}
		})
	}
	expectError(t, c.get("/v1/kv/missing", "If-Match", "*"), http.StatusNotFound, "not_found")
}

// A PUT's body is the value as sent: kvd decodes no content coding, so a
// gzip-encoded body stored as is would read back as other bytes than the
// client meant to store (RFC 9110 8.4: a 415).
func TestPutRefusesContentCoding(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	for _, ce := range []string{"gzip", "deflate, gzip", "br"} {
		expectError(t, c.put("/v1/kv/k", "\x1f\x8b", "Content-Encoding", ce), http.StatusUnsupportedMediaType, "unsupported_media_type")
	}
	expectError(t, c.get("/v1/kv/k"), http.StatusNotFound, "not_found")
	for _, ce := range []string{"identity", "Identity"} {
		require.Equal(t, http.StatusNoContent, c.put("/v1/kv/k", "v", "Content-Encoding", ce).status)
	}
	require.Equal(t, "v", string(c.get("/v1/kv/k").body))
}

// A stored PUT answers the new item's ETag, as GET would, so a client can
// chain If-Match writes without a GET in between (RFC 9110 8.8.3: the
// value is stored as sent, so its validator may be sent).
func TestPutAnswersETag(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())

	r := c.put("/v1/kv/k", "v1", "If-None-Match", "*")
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
	tag1 := r.header.Get("ETag")
	require.Regexp(t, `^"[0-9]+"$`, tag1)
	require.Equal(t, c.get("/v1/kv/k").header.Get("ETag"), tag1)

	r = c.put("/v1/kv/k", "v2", "If-Match", tag1)
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
	tag2 := r.header.Get("ETag")
	require.Regexp(t, `^"[0-9]+"$`, tag2)
	require.NotEqual(t, tag1, tag2)
	require.Equal(t, c.get("/v1/kv/k").header.Get("ETag"), tag2)

	// The first token is stale now: the chain refuses a lost update.
	expectError(t, c.put("/v1/kv/k", "v3", "If-Match", tag1), http.StatusPreconditionFailed, "cas_mismatch")

	r = c.put("/v1/kv/k?flags=3&ttl=100", "v3", "If-Match", "*")
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
	require.Equal(t, c.get("/v1/kv/k").header.Get("ETag"), r.header.Get("ETag"))

	// An item stored already expired has no representation to tag.
	r = c.put("/v1/kv/gone?ttl=-1", "x")
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
	require.Empty(t, r.header.Get("ETag"))
}
