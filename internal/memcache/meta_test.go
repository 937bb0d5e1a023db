package memcache_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/node"
)

// startMetaNode is startNode once the cluster applies the meta writes
// (cluster version 5), which a new node reaches moments after it is ready.
func startMetaNode(t testing.TB) *node.Node {
	n := startNode(t)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/version")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct {
			Cur uint64 `json:"cluster_version"`
			Max uint64 `json:"max_cluster_version"`
		}
		return json.NewDecoder(resp.Body).Decode(&v) == nil && v.Cur == v.Max
	}, time.Minute, 10*time.Millisecond)
	return n
}

// meta sends req followed by mn and returns the reply lines before MN.
func (c *client) meta(req string) []string {
	c.tb.Helper()
	lines := c.do(req+"mn\r\n", "MN")
	require.Equal(c.tb, "MN", lines[len(lines)-1], "reply to %q", req)
	return lines[:len(lines)-1]
}

var casToken = regexp.MustCompile(` c(\d+)`)

// TestMetaReadMarks: h and l are the item's replicated state, moved by
// reads through the node's batches; the reading connection sees its own
// read counted, and so does another, and u reads without counting.
func TestMetaReadMarks(t *testing.T) {
	n := startMetaNode(t)
	a, b := dial(t, n.MemcacheAddr()), dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"HD"}, a.meta("ms k 1\r\nx\r\n"))
	require.Equal(t, []string{"HD h0 l0 t-1"}, a.meta("mg k h l t u\r\n"))
	require.Equal(t, []string{"VA 1", "x"}, a.meta("mg k v u\r\n"), "u: a read that does not count")
	require.Equal(t, []string{"HD h0"}, a.meta("mg k h u\r\n"))
	require.Equal(t, []string{"VALUE k 0 1", "x", "END"}, a.do("get k\r\n"))
	require.Equal(t, []string{"HD h1"}, a.meta("mg k h u\r\n"), "the same connection's get")
	require.Equal(t, []string{"HD h1"}, b.meta("mg k h\r\n"), "another connection")
	require.Equal(t, []string{"HD"}, a.meta("ms k 1\r\ny\r\n"))
	require.Equal(t, []string{"HD h0"}, b.meta("mg k h\r\n"), "a new value is unread")
	require.Equal(t, []string{"HD h1"}, a.meta("mg k h\r\n"), "until an mg reads it")
}

// TestMetaStaleWhileRevalidate: md I marks the item stale; the first read
// wins its recache token (W, with X), every later one sees Z; a store with
// the CAS the winner read makes it fresh again.
func TestMetaStaleWhileRevalidate(t *testing.T) {
	n := startMetaNode(t)
	a, b := dial(t, n.MemcacheAddr()), dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"HD"}, a.meta("ms k 3 T100\r\nold\r\n"))
	require.Equal(t, []string{"HD"}, a.meta("md k I T30\r\n"))
	won := a.meta("mg k v c t\r\n")
	require.Len(t, won, 2)
	require.Regexp(t, `^VA 3 c\d+ t(29|30) X W$`, won[0])
	require.Equal(t, "old", won[1])
	cas := casToken.FindStringSubmatch(won[0])[1]
	lost := b.meta("mg k v c\r\n")
	require.Equal(t, []string{"VA 3 c" + cas + " Z X", "old"}, lost)
	require.Equal(t, []string{"HD c" + cas + " Z X"}, a.meta("mg k c\r\n"))
	// An older CAS with I stores the value, still stale.
	require.Equal(t, []string{"HD"}, b.meta("ms k 3 I C1\r\nmid\r\n"))
	require.Regexp(t, `^VA 3 Z X$`, b.meta("mg k v\r\n")[0])
	// The winner recaches; the item is fresh.
	cas = casToken.FindStringSubmatch(a.meta("mg k c\r\n")[0])[1]
	require.Equal(t, []string{"HD"}, a.meta("ms k 3 C"+cas+"\r\nnew\r\n"))
	require.Equal(t, []string{"VA 3", "new"}, b.meta("mg k v\r\n"))
}

// TestMetaVivifyAndRecache: N creates a missing item and hands its token to
// exactly one reader; R hands one out when the item expires sooner than
// its value says.
func TestMetaVivifyAndRecache(t *testing.T) {
	n := startMetaNode(t)
	a, b := dial(t, n.MemcacheAddr()), dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"VA 0 W", ""}, a.meta("mg nk N30 v\r\n"))
	require.Equal(t, []string{"VA 0 Z", ""}, b.meta("mg nk N30 v\r\n"))
	require.Equal(t, []string{"HD"}, a.meta("ms rk 1 T10\r\nx\r\n"))
	require.Equal(t, []string{"HD"}, a.meta("mg rk R5\r\n"), "10 s left, more than 5")
	require.Equal(t, []string{"HD W"}, a.meta("mg rk R30\r\n"))
	require.Equal(t, []string{"HD Z"}, b.meta("mg rk R30\r\n"))
}

// TestMetaExplicitCAS: E gives the item the client's CAS, which gets and
// cas then use like any other.
func TestMetaExplicitCAS(t *testing.T) {
	n := startMetaNode(t)
	c := dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"HD c999"}, c.meta("ms k 1 E999 c\r\nx\r\n"))
	require.Equal(t, []string{"VALUE k 0 1 999", "x", "END"}, c.do("gets k\r\n"))
	require.Equal(t, []string{"STORED"}, c.do("cas k 0 0 1 999\r\ny\r\n", "STORED"))
	require.Equal(t, []string{"HD c1000"}, c.meta("ma n N0 E1000 c\r\n"))
	require.Equal(t, []string{"VA 1 c7", "1"}, c.meta("ma n E7 c v\r\n"))
	require.Equal(t, []string{"HD"}, c.meta("md n I E55\r\n"))
	require.Equal(t, []string{"HD c55 X W"}, c.meta("mg n c\r\n"))
	require.Equal(t, []string{"HD"}, c.meta("md n x\r\n"))
	require.Equal(t, []string{"VA 0 f0", ""}, c.meta("mg n v f\r\n"), "x keeps the item, empty")
}

// TestMetaCounters: meta commands move memcached's general stats as
// memcached counts them.
func TestMetaCounters(t *testing.T) {
	n := startMetaNode(t)
	c := dial(t, n.MemcacheAddr())
	before := stats(t, c.do("stats\r\n"))
	c.meta("ms k 1\r\n5\r\n")
	c.meta("mg k\r\n")
	c.meta("mg missing\r\n")
	c.meta("mg k T10\r\n")
	c.meta("ma k\r\n")
	c.meta("ma k MD\r\n")
	c.meta("ma nothere\r\n")
	c.meta("md k\r\n")
	c.meta("md k\r\n")
	c.meta("me k\r\n")
	after := stats(t, c.do("stats\r\n"))
	want := map[string]int{"cmd_set": 1, "cmd_get": 2, "get_hits": 1, "get_misses": 1, "cmd_touch": 1,
		"touch_hits": 1, "incr_hits": 1, "decr_hits": 1, "incr_misses": 1, "delete_hits": 1,
		"delete_misses": 1, "cmd_meta": 1}
	for name, d := range want {
		require.Equal(t, d, atoi(t, after[name])-atoi(t, before[name]), name)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	for _, r := range strings.TrimSpace(s) {
		require.True(t, r >= '0' && r <= '9', "not a number: %q", s)
		n = n*10 + int(r-'0')
	}
	return n
}

// TestMetaQuietPipelineIsBounded: a long pipeline of quiet misses answers
// nothing but the mn that ends it, and holds no reply per request while it
// is read: the heap grows by less than the requests themselves take.
func TestMetaQuietPipelineIsBounded(t *testing.T) {
	n := startMetaNode(t)
	c := dial(t, n.MemcacheAddr())
	const requests = 200_000
	line := "mg nothing-here-at-all q v k Oabcdefgh\r\n"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go func() {
		chunk := strings.Repeat(line, 1000)
		for range requests / 1000 {
			if _, err := c.nc.Write([]byte(chunk)); err != nil {
				return
			}
		}
		_, _ = c.nc.Write([]byte("mn\r\n"))
	}()
	require.NoError(t, c.nc.SetReadDeadline(time.Now().Add(time.Minute)))
	got, err := c.rw.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "MN\r\n", got, "a quiet miss answered")
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	// Holding anything per request (a reply, its echo of the flags and
	// key) would cost more than the requests' own bytes; the in-process
	// node's own work moves the heap by a few MB meanwhile.
	require.Less(t, grew, int64(requests*len(line)), "heap grew by %d bytes over %d quiet requests", grew, requests)
}
