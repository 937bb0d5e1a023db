package e2e

import (
	"bufio"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// metaOnce sends req and an mn on a connection of its own and returns the
// reply lines before MN. Safe in any goroutine: it reports, not fails.
func metaOnce(addr, req string) ([]string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte(req + "mn\r\n")); err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	var lines []string
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return lines, fmt.Errorf("after %q: %w", lines, err)
		}
		l = strings.TrimSuffix(l, "\r\n")
		if l == "MN" {
			return lines, nil
		}
		lines = append(lines, l)
	}
}

// race sends req once from each of n clients at the same moment, client i
// through addrs[i%len(addrs)], and returns their first reply lines (the
// failed ones' as "error: …").
func race(addrs []string, n int, req string) []string {
	var wg sync.WaitGroup
	start := make(chan struct{})
	out := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			lines, err := metaOnce(addrs[i%len(addrs)], req)
			switch {
			case err != nil:
				out[i] = "error: " + err.Error()
			case len(lines) == 0:
				out[i] = "error: no reply"
			default:
				out[i] = lines[0]
			}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// winners counts the replies that carry W, and checks every other one says
// the token was taken (Z). stale: every reply must carry X too.
func winners(t *testing.T, replies []string, stale bool) int {
	t.Helper()
	won := 0
	for _, r := range replies {
		require.NotContains(t, r, "error", "replies: %q", replies)
		toks := strings.Fields(r)
		has := func(m string) bool { return strings.Contains(" "+strings.Join(toks[1:], " ")+" ", " "+m+" ") }
		if stale {
			require.True(t, has("X"), "a reply without X: %q", r)
		}
		if has("W") {
			won++
			require.False(t, has("Z"), "a win with Z: %q", r)
		} else {
			require.True(t, has("Z"), "neither W nor Z: %q", r)
		}
	}
	return won
}

var metaCAS = regexp.MustCompile(` c(\d+)`)

// TestStaleWhileRevalidateAcrossTheCluster: the recache token of a stale
// item (md I) and of a missing one (mg N) is won by exactly one of many
// clients racing on all three nodes, because winning it is a write in the
// log; the winner's store with the CAS it read makes the item fresh on
// every node; and the same holds across a leader kill. h, which reads
// change, is the same on every node.
func TestStaleWhileRevalidateAcrossTheCluster(t *testing.T) {
	procs := kvdproc.StartCluster(t, 3)
	var addrs []string
	for _, p := range procs {
		p.WaitClusterVersion()
		addrs = append(addrs, p.MemcacheAddr)
	}
	const clients = 12

	// A stale item: one winner, on whichever node.
	lines, err := metaOnce(addrs[0], "ms swr 3 T100\r\nold\r\n")
	require.NoError(t, err)
	require.Equal(t, []string{"HD"}, lines)
	lines, err = metaOnce(addrs[1], "md swr I T30\r\n")
	require.NoError(t, err)
	require.Equal(t, []string{"HD"}, lines)
	replies := race(addrs, clients, "mg swr v c\r\n")
	require.Equal(t, 1, winners(t, replies, true), "replies: %q", replies)
	var cas string
	for _, r := range replies {
		if strings.HasSuffix(r, " W") {
			cas = metaCAS.FindStringSubmatch(r)[1]
		}
	}
	lines, err = metaOnce(addrs[2], "ms swr 3 T100 C"+cas+"\r\nnew\r\n")
	require.NoError(t, err)
	require.Equal(t, []string{"HD"}, lines, "the winner recaches")
	for _, a := range addrs {
		lines, err := metaOnce(a, "mg swr v\r\n")
		require.NoError(t, err)
		require.Equal(t, []string{"VA 3", "new"}, lines, "fresh on %s", a)
	}

	// A missing item, vivified: one winner.
	replies = race(addrs, clients, "mg viv N30 v\r\n")
	require.Equal(t, 1, winners(t, replies, false), "replies: %q", replies)

	// h: read on one node, reported on the others once the node's read
	// batch is applied (bounded).
	lines, err = metaOnce(addrs[0], "ms seen 1\r\nx\r\nmg seen v\r\n")
	require.NoError(t, err)
	require.Equal(t, []string{"HD", "VA 1", "x"}, lines)
	for _, a := range addrs[1:] {
		require.Eventually(t, func() bool {
			lines, err := metaOnce(a, "mg seen h u\r\n")
			return err == nil && len(lines) == 1 && lines[0] == "HD h1"
		}, 5*time.Second, 20*time.Millisecond, "h on %s", a)
	}

	// Across a leader kill: the survivors race for a stale item's token.
	lines, err = metaOnce(addrs[0], "ms fo 1 T100\r\nx\r\nmd fo I\r\n")
	require.NoError(t, err)
	require.Equal(t, []string{"HD", "HD"}, lines)
	lead := leaderOf(t, procs)
	procs[lead].Kill()
	var survivors []string
	for i, a := range addrs {
		if i != lead {
			survivors = append(survivors, a)
		}
	}
	// A new leader first: a request timed out in the election could win
	// the token with nobody told, which is no double win but would leave
	// this test none to count.
	setUntilOK(t, survivors[0], "after-kill", "v", 15*time.Second)
	replies = race(survivors, clients, "mg fo v c\r\n")
	require.Equal(t, 1, winners(t, replies, true), "replies: %q", replies)
}
