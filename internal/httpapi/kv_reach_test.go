package httpapi_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// memcached splits a command line on spaces only, so the memcache port
// stores keys with control bytes, and the listing shows them. Every key it
// can hold must be reachable over HTTP too: read, listed by prefix and
// deleted. Creating such a key over HTTP stays refused (memcached's
// documented key rule).
func TestKeysTheMemcachePortStores(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	for _, key := range []string{"a\x01b", "tab\there", "del\x7f", "nul\x00", "cr\rlf", "\x1b[31m"} {
		t.Run(url.PathEscape(key), func(t *testing.T) {
			res, err := n.KV().Do(t.Context(), &command.Command{Op: command.OpSet, Key: []byte(key), Value: []byte("v"), Flags: 3})
			require.NoError(t, err)
			require.Equal(t, command.StatusStored, res.Status)
			path := "/v1/kv/" + url.PathEscape(key)

			r := c.get(path)
			require.Equal(t, http.StatusOK, r.status, "GET %q: %s", key, r.body)
			require.Equal(t, "v", string(r.body))
			require.Equal(t, "3", r.header.Get("X-Kvd-Flags"))
			require.Equal(t, http.StatusOK, c.do(http.MethodHead, path, nil).status)

			r = c.get("/v1/kv?prefix=" + url.QueryEscape(key))
			require.Equal(t, http.StatusOK, r.status, "list %q: %s", key, r.body)
			require.Contains(t, string(r.body), `"size":1`)

			expectError(t, c.put(path, "w"), http.StatusBadRequest, "bad_key")

			r = c.do(http.MethodDelete, path, nil)
			require.Equal(t, http.StatusNoContent, r.status, "DELETE %q: %s", key, r.body)
			expectError(t, c.get(path), http.StatusNotFound, "not_found")
		})
	}
	// What no memcache key can hold stays a 400 everywhere.
	for _, path := range []string{"/v1/kv/a%20b", "/v1/kv/a%0Ab", "/v1/kv/" + url.PathEscape(string(make([]byte, 251)))} {
		expectError(t, c.get(path), http.StatusBadRequest, "bad_key")
		expectError(t, c.do(http.MethodDelete, path, nil), http.StatusBadRequest, "bad_key")
	}
	expectError(t, c.get("/v1/kv?prefix=a%0A"), http.StatusBadRequest, "bad_key")
}
