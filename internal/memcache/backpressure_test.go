package memcache_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/mcserver"
	"github.com/kvd-project/kvd/internal/memcache"
)

// TestPipelinedGatsWaitForTheClient: a client that pipelines gats and reads
// nothing stops being read from after a few of them, as it does with gets.
// A gat's touches come back with their values, so every gat the reader
// proposed held its hits in memory until the writer got to it; the reader
// went on proposing while the writer was stuck on the silent client, and a
// queue of gats of 16 keys of a 1 MiB item held 4 GiB. The reader's
// progress shows in cmd_touch, counted as each gat is read.
func TestPipelinedGatsWaitForTheClient(t *testing.T) {
	_, addr := ownServer(t, mcserver.Config{})
	probe := dial(t, addr)
	value := strings.Repeat("v", 64<<10)
	require.Equal(t, []string{"STORED"}, probe.do(fmt.Sprintf("set big 0 0 %d\r\n%s\r\n", len(value), value), "STORED"))
	touches := func() int { return statInt(t, probe, "cmd_touch") }
	before := touches()

	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.(*net.TCPConn).SetReadBuffer(64<<10))
	const gats, keys = 64, 16 // each reply 1 MiB
	line := "gat 0" + strings.Repeat(" big", keys) + "\r\n"
	_, err = nc.Write([]byte(strings.Repeat(line, gats)))
	require.NoError(t, err)

	// Wait until the reader stops (the count holds still) or has read
	// every gat; a count that holds still for a while and is short of
	// every gat is the reader waiting for the client.
	waitStill(func() int { return touches() - before }, gats*keys)
	n := touches() - before
	require.Less(t, n, gats*keys/4, "the server read on while the client read nothing: %d of %d touches", n, gats*keys)

	// Once the client reads, every reply comes, whole and in order.
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(time.Minute)))
	r := bufio.NewReaderSize(nc, 128<<10)
	for g := range gats {
		for k := range keys {
			head, err := r.ReadString('\n')
			require.NoError(t, err, "gat %d key %d", g, k)
			require.Equal(t, fmt.Sprintf("VALUE big 0 %d\r\n", len(value)), head)
			data := make([]byte, len(value)+2)
			_, err = io.ReadFull(r, data)
			require.NoError(t, err)
		}
		end, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "END\r\n", end, "gat %d", g)
	}
}

// TestLargeGatHoldsAFewItems: a gat of large items whose client reads
// nothing holds a few items' worth of values per connection, about what a
// get holds (its reply budget), not chunks of 16 of them. Each touch comes
// back with its item's value, and a gat was proposed 16 keys at a time with
// two chunks in flight behind the one being written: a 1 MiB line naming a
// 1 MiB item over and over held 48 MiB of values (70 MiB of heap) per
// connection. The reply is still every value, whole and in order.
func TestLargeGatHoldsAFewItems(t *testing.T) {
	srv, addr := ownServer(t, mcserver.Config{})
	probe := dial(t, addr)
	value := strings.Repeat("v", 1<<20)
	require.Equal(t, []string{"STORED"}, probe.do(fmt.Sprintf("set big 0 0 %d\r\n%s\r\n", len(value), value), "STORED"))
	proposed := func() int { return int(srv.kv.gats.Load()) }

	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.(*net.TCPConn).SetReadBuffer(64<<10))
	const keys = 3 * memcache.GatChunk
	_, err = nc.Write([]byte("gat 0" + strings.Repeat(" big", keys) + "\r\n"))
	require.NoError(t, err)

	// Wait until the reader stops proposing (the count holds still) or has
	// proposed every key, the client still reading nothing.
	waitStill(proposed, keys)
	// Every touch proposed holds its value until it is written, and the
	// client has read nothing: what was proposed is at most what is held
	// plus what the socket buffers took.
	held := proposed()
	t.Logf("%d of %d touches proposed while the client read nothing", held, keys)
	require.LessOrEqual(t, held*len(value), 8<<20, "a gat whose client read nothing proposed %d touches of a %d-byte item", held, len(value))

	require.NoError(t, nc.SetReadDeadline(time.Now().Add(time.Minute)))
	r := bufio.NewReaderSize(nc, 128<<10)
	for k := range keys {
		head, err := r.ReadString('\n')
		require.NoError(t, err, "key %d", k)
		require.Equal(t, fmt.Sprintf("VALUE big 0 %d\r\n", len(value)), head, "key %d", k)
		data := make([]byte, len(value)+2)
		_, err = io.ReadFull(r, data)
		require.NoError(t, err)
		require.Equal(t, value+"\r\n", string(data), "key %d", k)
	}
	end, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "END\r\n", end)

}

// TestGatOfSmallValuesAnswersLikeGet: a gat of many small values, chunked
// to bound what it holds, answers what a get of the same keys returns, on a
// connection's first gat (chunks sized for the largest values) and after
// (chunks sized by what it has seen; TestGatChunkKeys checks the sizes).
func TestGatOfSmallValuesAnswersLikeGet(t *testing.T) {
	_, addr := ownServer(t, mcserver.Config{})
	c := dial(t, addr)
	value := strings.Repeat("s", 100)
	var keys []string
	for i := range 100 {
		k := fmt.Sprintf("small%d", i)
		keys = append(keys, k)
		require.Equal(t, []string{"STORED"}, c.do(fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", k, len(value), value), "STORED"))
	}
	line := strings.Repeat(" "+strings.Join(keys, " "), 10) // 1,000 keys
	want := c.do("get" + line + "\r\n")
	require.Len(t, want, 2*1000+1)
	require.Equal(t, want, c.do("gat 0"+line+"\r\n"), "the connection's first gat")
	require.Equal(t, want, c.do("gat 0"+line+"\r\n"))
}

// TestPipelinedStatsWaitForTheClient: replies queued behind a write count
// against the connection's reply budget, whatever their command. Only the
// queue's length bounded them, and a `stats conns` grows with the
// connections: a client that pipelined a gat of a large item and then
// many of them, reading nothing, had 256 of them queued behind the gat
// (about 35 MB with 1,000 connections open, per connection doing it).
func TestPipelinedStatsWaitForTheClient(t *testing.T) {
	const others = 1000
	srv, addr := ownServer(t, mcserver.Config{MaxConnections: others + 10})
	for range others {
		dial(t, addr)
	}
	probe := dial(t, addr)
	require.Greater(t, len(probe.do("stats conns\r\n")), 4*others, "every connection is listed")
	served := func() uint64 {
		for _, cs := range srv.Stats().Commands() {
			if cs.Command == "stats" {
				for r, v := range cs.Results {
					if memcache.ResultName(r) == "ok" {
						return v
					}
				}
			}
		}
		t.Fatal("no stats command counters")
		return 0
	}
	value := strings.Repeat("v", 1<<20)
	require.Equal(t, []string{"STORED"}, probe.do(fmt.Sprintf("set big 0 0 %d\r\n%s\r\n", len(value), value), "STORED"))
	before := served()

	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.(*net.TCPConn).SetReadBuffer(64<<10))
	const pipelined = 600
	// The gat's reply fills the socket and keeps the writer busy, so the
	// replies after it queue up.
	_, err = nc.Write([]byte("gat 0" + strings.Repeat(" big", 8) + "\r\n" + strings.Repeat("stats conns\r\n", pipelined)))
	require.NoError(t, err)

	// Wait until the reader, past the gat, stops (the count holds still)
	// or has read every request.
	last, still := uint64(0), 0
	for i := 0; i < 3000 && still < 20; i++ {
		n := served() - before
		if n == pipelined {
			break
		}
		if n == last && n > 0 {
			still++
		} else {
			last, still = n, 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	n := served() - before
	require.Less(t, n, uint64(150), "the server read on while the client read nothing: %d of %d", n, pipelined)
}

// waitStill polls count until it reaches all or holds still for 20 polls
// 10 ms apart (at most 30 s): the server stopped reading, or read it all.
// Stopping early on a slow machine can only let a bound on what was read
// pass, never fail it.
func waitStill(count func() int, all int) {
	last, still := -1, 0
	for i := 0; i < 3000 && still < 20; i++ {
		n := count()
		if n == all {
			return
		}
		if n == last {
			still++
		} else {
			last, still = n, 0
		}
		time.Sleep(10 * time.Millisecond)
	}
}
