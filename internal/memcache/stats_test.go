package memcache_test

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
)

type client struct {
	tb testing.TB
	nc net.Conn
	rw *bufio.ReadWriter
}

func dial(tb testing.TB, addr string) *client {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = nc.Close() })
	return &client{tb: tb, nc: nc, rw: bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))}
}

// do sends req and returns the reply lines (without CRLF) up to and
// including the first line that is one of the final lines.
func (c *client) do(req string, final ...string) []string {
	c.tb.Helper()
	if len(final) == 0 {
		final = []string{"END", "ERROR", "RESET", "OK"}
	}
	_, err := c.rw.WriteString(req)
	require.NoError(c.tb, err)
	require.NoError(c.tb, c.rw.Flush())
	require.NoError(c.tb, c.nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	var lines []string
	for {
		line, err := c.rw.ReadString('\n')
		require.NoError(c.tb, err, "after %q", lines)
		line = strings.TrimSuffix(line, "\r\n")
		lines = append(lines, line)
		for _, f := range final {
			if line == f || strings.HasPrefix(line, "CLIENT_ERROR") || strings.HasPrefix(line, "SERVER_ERROR") {
				return lines
			}
		}
	}
}

// stats parses STAT lines into a map; it fails on anything else but END.
// statInt is the general stat name as c reads it now.
func statInt(tb testing.TB, c *client, name string) int {
	tb.Helper()
	n, err := strconv.Atoi(stats(tb, c.do("stats\r\n"))[name])
	require.NoError(tb, err, "stat %s", name)
	return n
}

func stats(tb testing.TB, lines []string) map[string]string {
	tb.Helper()
	require.Equal(tb, "END", lines[len(lines)-1])
	out := map[string]string{}
	for _, l := range lines[:len(lines)-1] {
		f := strings.SplitN(l, " ", 3)
		require.Len(tb, f, 3, "line %q", l)
		require.Equal(tb, "STAT", f[0], "line %q", l)
		_, dup := out[f[1]]
		require.False(tb, dup, "stat %s twice", f[1])
		out[f[1]] = f[2]
	}
	return out
}

func TestStatsConns(t *testing.T) {
	n := startNode(t)
	idle := dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"VERSION 1.6.21"}, idle.do("version\r\n", "VERSION 1.6.21"))
	me := dial(t, n.MemcacheAddr())
	// The idle connection's reader marks itself conn_read (memcached's
	// state for a connection waiting for its next line) when it waits for
	// more bytes, just after its reply is written, so the client may ask
	// before it has.
	idleAddr := "tcp:" + idle.nc.LocalAddr().String()
	var st map[string]string
	require.Eventually(t, func() bool {
		st = stats(t, me.do("stats conns\r\n"))
		for k, v := range st {
			if id, field, _ := strings.Cut(k, ":"); field == "addr" && v == idleAddr {
				return st[id+":state"] == "conn_read"
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)

	// Every ID has addr, state and secs_since_last_cmd; clients also have
	// listen_addr.
	byAddr := map[string]string{} // addr → id
	for k, v := range st {
		id, field, ok := strings.Cut(k, ":")
		require.True(t, ok, "stat %s", k)
		_, err := strconv.ParseUint(id, 10, 64)
		require.NoError(t, err, "stat %s", k)
		if field == "addr" {
			byAddr[v] = id
			require.Contains(t, st, id+":state")
			require.Contains(t, st, id+":secs_since_last_cmd")
		}
	}
	listen := "tcp:" + n.MemcacheAddr()
	lid, ok := byAddr[listen]
	require.True(t, ok, "listener missing in %v", st)
	require.Equal(t, "conn_listening", st[lid+":state"])

	myID, ok := byAddr["tcp:"+me.nc.LocalAddr().String()]
	require.True(t, ok, "this connection missing in %v", st)
	require.Equal(t, "conn_parse_cmd", st[myID+":state"], "the connection asking is handling its command")
	require.Equal(t, listen, st[myID+":listen_addr"])
	// Whole seconds on both ends: a second may begin between the command's
	// arrival and the reply.
	require.Contains(t, []string{"0", "1"}, st[myID+":secs_since_last_cmd"])

	idleID, ok := byAddr[idleAddr]
	require.True(t, ok, "idle connection missing in %v", st)
	require.Equal(t, "conn_read", st[idleID+":state"])
	require.Len(t, byAddr, 3)
}

// TestStatsConnsStates: each connection is in the state memcached 1.6.18
// shows for it: conn_new_cmd before its first request, conn_read while it
// waits for a line (idle after a reply, or a line cut short), conn_nread
// while a storage command's data block arrives, and conn_swallow while a
// value too large is discarded.
func TestStatsConnsStates(t *testing.T) {
	n := startNode(t, func(c *config.Config) { c.MaxItemSize = 1024 })
	fresh := dial(t, n.MemcacheAddr())
	idle := dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"STORED"}, idle.do("set k 0 0 1\r\nx\r\n", "STORED"))
	partLine := dial(t, n.MemcacheAddr())
	partBlock := dial(t, n.MemcacheAddr())
	swallow := dial(t, n.MemcacheAddr())
	for c, req := range map[*client]string{
		partLine:  "get k",
		partBlock: "set k 0 0 10\r\nabc",
		swallow:   "set k 0 0 5000\r\nabc",
	} {
		_, err := c.nc.Write([]byte(req))
		require.NoError(t, err)
	}
	want := map[*client]string{
		fresh:     "conn_new_cmd",
		idle:      "conn_read",
		partLine:  "conn_read",
		partBlock: "conn_nread",
		swallow:   "conn_swallow",
	}
	me := dial(t, n.MemcacheAddr())
	// Each reader marks its state when it starts to wait for bytes, which
	// may be after the client's write returns: poll.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := stats(t, me.do("stats conns\r\n"))
		got := map[string]string{} // state by client address
		for k, v := range st {
			if id, field, _ := strings.Cut(k, ":"); field == "addr" {
				got[v] = st[id+":state"]
			}
		}
		mismatch := ""
		for c, state := range want {
			if addr := "tcp:" + c.nc.LocalAddr().String(); got[addr] != state {
				mismatch = addr + " is " + got[addr] + ", want " + state
			}
		}
		if mismatch == "" {
			return
		}
		require.True(t, time.Now().Before(deadline), "%s (all: %v)", mismatch, got)
		time.Sleep(time.Millisecond)
	}
}

func TestStatsRaft(t *testing.T) {
	n := startNode(t)
	c := dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"STORED"}, c.do("set k 0 0 1\r\nv\r\n", "STORED"))
	st := stats(t, c.do("stats raft\r\n"))

	s := n.KV().Status()
	id := strconv.FormatUint(uint64(s.ID), 16)
	require.Equal(t, id, st["id"])
	require.Equal(t, "leader", st["role"])
	require.Equal(t, id, st["leader"])
	require.Equal(t, "1", st["ready"])
	require.Equal(t, "1", st["voters"])
	require.Equal(t, "0", st["learners"])
	require.Equal(t, "voter", st["member:"+id+":kind"])
	for _, k := range []string{"term", "commit_index", "applied_index"} {
		v, err := strconv.ParseUint(st[k], 10, 64)
		require.NoError(t, err, k)
		require.NotZero(t, v, k)
	}
	require.Equal(t, st["commit_index"], st["applied_index"], "a group of one applies what it commits before replying")
	if name, ok := st["name"]; ok { // only when the node passes its name
		require.Equal(t, "n1", name)
		require.Equal(t, "n1", st["leader_name"])
	}
}

// TestStatsSubcommands pins the replies memcached 1.6 gives to the
// subcommands about its slab allocator, and ERROR for unknown ones.
func TestStatsSubcommands(t *testing.T) {
	n := startNode(t)
	c := dial(t, n.MemcacheAddr())
	for _, tc := range []struct{ req, want string }{
		{"stats items", "END"},
		{"stats slabs", "STAT active_slabs 0|STAT total_malloced 0|END"},
		{"stats sizes", "STAT sizes_status disabled|END"},
		{"stats detail dump", "END"},
		{"stats detail", "CLIENT_ERROR usage: stats detail on|off|dump"},
		{"stats cachedump 1 1", "END"},
		{"stats cachedump", "CLIENT_ERROR bad command line"},
		{"stats cachedump 1", "CLIENT_ERROR bad command line"},
		{"stats cachedump x 1", "CLIENT_ERROR bad command line format"},
		{"stats cachedump 64 0", "CLIENT_ERROR Illegal slab id"},
		{"stats reset", "RESET"},
		{"stats bogus", "ERROR"},
		{"stats raft2", "ERROR"},
	} {
		require.Equal(t, tc.want, strings.Join(c.do(tc.req+"\r\n"), "|"), tc.req)
	}
	// The connection survives all of them.
	require.Equal(t, []string{"VERSION 1.6.21"}, c.do("version\r\n", "VERSION 1.6.21"))
}

// TestStatsReset: `stats reset` zeroes the running totals, as memcached's
// does, and leaves current state alone; the counters go on from zero.
func TestStatsReset(t *testing.T) {
	n := startNode(t)
	c := dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"STORED"}, c.do("set a 0 0 1\r\nx\r\n", "STORED"))
	c.do("get a b\r\n")
	before := stats(t, c.do("stats\r\n"))
	require.Equal(t, "2", before["cmd_get"])
	require.Equal(t, "1", before["cmd_set"])
	require.Equal(t, "1", before["curr_items"])
	require.Regexp(t, `^\d+\.\d{6}$`, before["rusage_user"])

	require.Equal(t, []string{"RESET"}, c.do("stats reset\r\n"))
	after := stats(t, c.do("stats\r\n"))
	for _, name := range []string{"cmd_get", "cmd_set", "get_hits", "get_misses", "total_items", "total_connections"} {
		require.Equal(t, "0", after[name], name)
	}
	require.Equal(t, "1", after["curr_items"], "current state is not reset")
	require.Equal(t, "1", after["curr_connections"])
	require.NotEqual(t, "0", after["bytes_read"], "bytes read since the reset: the stats request itself")

	c.do("get a\r\n")
	again := stats(t, c.do("stats\r\n"))
	require.Equal(t, "1", again["cmd_get"])
	require.Equal(t, "1", again["get_hits"])
}

// TestStatsCountLikeMemcached: the counters move as memcached 1.6's do for
// the requests where counting is not obvious (each row's deltas were read
// off memcached; the differential test in internal/testing/compat keeps
// checking them on random streams).
func TestStatsCountLikeMemcached(t *testing.T) {
	n := startNode(t)
	c := dial(t, n.MemcacheAddr())
	require.Equal(t, []string{"STORED"}, c.do("set hit 0 0 1\r\n9\r\n", "STORED"))
	tests := []struct {
		name, req string
		final     string
		want      map[string]int // counters not named must not move
	}{
		{"gat counts touches, not gets", "gat 0 hit miss\r\n", "END",
			map[string]int{"cmd_touch": 2, "touch_hits": 1, "touch_misses": 1}},
		{"a flush_all with a bad delay still counts", "flush_all abc\r\n", "CLIENT_ERROR invalid exptime argument",
			map[string]int{"cmd_flush": 1}},
		{"a set with a bad data chunk still counts", "set x 0 0 1\r\nxXY", "CLIENT_ERROR bad data chunk",
			map[string]int{"cmd_set": 1}},
		{"an incr that outgrows its value is a new item", "incr hit 1\r\n", "10",
			map[string]int{"incr_hits": 1, "total_items": 1}},
		{"an incr rewritten in place is not", "incr hit 1\r\n", "11",
			map[string]int{"incr_hits": 1}},
	}
	counters := []string{"cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "get_hits", "get_misses",
		"touch_hits", "touch_misses", "incr_hits", "incr_misses", "total_items"}
	for _, tt := range tests {
		before := stats(t, c.do("stats\r\n"))
		lines := c.do(tt.req, tt.final)
		require.Equal(t, tt.final, lines[len(lines)-1], tt.name)
		after := stats(t, c.do("stats\r\n"))
		for _, name := range counters {
			b, err := strconv.Atoi(before[name])
			require.NoError(t, err, name)
			a, err := strconv.Atoi(after[name])
			require.NoError(t, err, name)
			require.Equal(t, tt.want[name], a-b, "%s: %s", tt.name, name)
		}
	}
}
