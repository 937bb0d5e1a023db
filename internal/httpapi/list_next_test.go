package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// The memcache port splits keys on spaces only, as memcached does, so a key
// may hold other control bytes the HTTP API refuses in a PUT's key. A page of
// the listing that ends on such a key must still lead to the next one: the
// next link kvd itself returns is never refused.
func TestListNextPastKeysWithControlBytes(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	keys := []string{"c\x01e", "c\tb", "c\x7fd", "cz"}
	for _, k := range keys {
		res, err := n.KV().Do(t.Context(), &command.Command{Op: command.OpSet, Key: []byte(k), Value: []byte("v")})
		require.NoError(t, err)
		require.Equal(t, command.StatusStored, res.Status)
	}
	var got []string
	path := "/v1/kv?prefix=c&limit=1"
	for range len(keys) + 1 {
		r := c.get(path)
		require.Equal(t, http.StatusOK, r.status, "GET %s: %s", path, r.body)
		var p struct {
			Items []struct{ Key string }
			Next  string
		}
		require.NoError(t, json.Unmarshal(r.body, &p))
		for _, it := range p.Items {
			got = append(got, it.Key)
		}
		if p.Next == "" {
			break
		}
		path = p.Next
	}
	require.Equal(t, []string{"c\x01e", "c\tb", "cz", "c\x7fd"}, got, "byte order")
}
