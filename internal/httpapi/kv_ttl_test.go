package httpapi_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ttl is memcached's exptime: 0 never, up to 30 days relative, beyond that
// an absolute Unix time (one in the past: already expired), negative
// already expired.
func TestPutTTLIsMemcachedExptime(t *testing.T) {
	n := startNode(t)
	c := newClient(t, "http://"+n.HTTPAddr())
	now := time.Now().Unix()
	const month = 30 * 24 * 60 * 60
	cases := []struct {
		ttl    string
		found  bool
		minExp int64 // 0: no X-Kvd-Expires
		maxExp int64
	}{
		{"0", true, 0, 0},
		{"-0", true, 0, 0},
		{"+10", true, now + 9, now + 12},
		{"1", true, now, now + 3},
		{strconv.Itoa(month), true, now + month - 1, now + month + 2},
		{strconv.Itoa(month + 1), false, 0, 0}, // absolute: 1970
		{strconv.FormatInt(now+1000, 10), true, now + 1000, now + 1000},
		{strconv.FormatInt(now-10, 10), false, 0, 0},
		{"-1", false, 0, 0},
		{"-9223372036854775808", false, 0, 0},
		{"9223372036854775807", true, 9223372036, 9223372037},
	}
	for i, tc := range cases {
		t.Run(tc.ttl, func(t *testing.T) {
			path := "/v1/kv/ttl" + strconv.Itoa(i)
			r := c.put(path+"?ttl="+url.QueryEscape(tc.ttl), "v")
			require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
			r = c.get(path)
			if !tc.found {
				expectError(t, r, http.StatusNotFound, "not_found")
				return
			}
			require.Equal(t, http.StatusOK, r.status)
			if tc.minExp == 0 {
				require.Empty(t, r.header.Get("X-Kvd-Expires"))
				return
			}
			exp, err := strconv.ParseInt(r.header.Get("X-Kvd-Expires"), 10, 64)
			require.NoError(t, err)
			require.GreaterOrEqual(t, exp, tc.minExp)
			require.LessOrEqual(t, exp, tc.maxExp)
		})
	}
}
