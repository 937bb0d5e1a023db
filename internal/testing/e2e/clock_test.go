package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/failpoint"
	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// TestClockSkewMovesNoExpiry: with one follower's clock 20 s behind and
// the other's 20 s ahead (then jumping further), expiry and delayed
// flush_all follow the leader's clock on every member (issue #49 part 2).
// Before the cluster clock, an item written through the slow member was
// born expired, one written through the fast member lived 20 s too long,
// and the slow member served every item 20 s past its expiry.
func TestClockSkewMovesNoExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a failpoint build of kvd for tens of seconds")
	}
	dir := t.TempDir()
	clockFile := func(name string) string { return filepath.Join(dir, name+".clock") }
	setClock := func(name, offset string) {
		t.Helper()
		tmp := clockFile(name) + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(offset), 0o600))
		require.NoError(t, os.Rename(tmp, clockFile(name)))
	}
	procs := kvdproc.StartFailpointCluster(t, 3, func(name string) []string {
		return []string{failpoint.ClockEnvVar + "=" + clockFile(name)}
	})
	lead := leaderOf(t, procs)
	var slow, fast *kvdproc.Proc
	for i, p := range procs {
		if i == lead {
			continue
		}
		if slow == nil {
			slow = p
		} else {
			fast = p
		}
	}
	setClock(slow.Name, "-20s")
	setClock(fast.Name, "20s")
	waitLog(t, slow, "failpoint clock: offset -20s", 5*time.Second)
	waitLog(t, fast, "failpoint clock: offset 20s", 5*time.Second)
	conns := map[*kvdproc.Proc]*rawConn{}
	for _, p := range procs {
		conns[p] = dial(t, p.MemcacheAddr)
	}
	get := func(p *kvdproc.Proc, key string) bool {
		t.Helper()
		c := conns[p]
		c.send("get " + key + "\r\n")
		l := c.line()
		if l == "END" {
			return false
		}
		require.Contains(t, l, "VALUE "+key+" ")
		c.line()
		require.Equal(t, "END", c.line())
		return true
	}

	// An item with a 3 s lifetime, written through each member.
	const ttl = 3 * time.Second
	written := time.Now()
	for _, p := range procs {
		c := conns[p]
		c.send(fmt.Sprintf("set via-%s 0 %d 1\r\nx\r\n", p.Name, int(ttl/time.Second)))
		require.Equal(t, "STORED", c.line())
	}
	// Live everywhere while its lifetime lasts: none was born expired.
	for _, p := range procs {
		for _, q := range procs {
			require.True(t, get(p, "via-"+q.Name), "%s hides the item written through %s before its expiry", p.Name, q.Name)
		}
	}
	require.Less(t, time.Since(written), ttl-time.Second, "the checks above ran too late to judge")
	// Each member says how far its clock is off the leader's.
	require.InDelta(t, 20, metricValue(t, slow.HTTPAddr, "kvd_clock_skew_seconds"), 2, "on %s, 20s behind", slow.Name)
	require.InDelta(t, -20, metricValue(t, fast.HTTPAddr, "kvd_clock_skew_seconds"), 2, "on %s, 20s ahead", fast.Name)
	// The fast member's clock jumps further ahead: nothing changes.
	setClock(fast.Name, "25s")
	waitLog(t, fast, "failpoint clock: offset 25s", 5*time.Second)
	time.Sleep(time.Until(written.Add(ttl + time.Second)))
	for _, p := range procs {
		for _, q := range procs {
			require.False(t, get(p, "via-"+q.Name), "%s serves the item written through %s after its expiry", p.Name, q.Name)
		}
	}

	// flush_all with a delay, given to the slow member: it hides what was
	// stored before it once its time comes by the leader's clock, not at
	// once (the slow clock's time is 20 s in the past) and not 20 s late.
	for _, p := range procs {
		conns[p].send("set keep-" + p.Name + " 0 0 1\r\nx\r\n")
		require.Equal(t, "STORED", conns[p].line())
	}
	flushed := time.Now()
	conns[slow].send("flush_all 2\r\n")
	require.Equal(t, "OK", conns[slow].line())
	for _, p := range procs {
		require.True(t, get(p, "keep-"+slow.Name), "%s: flush_all 2 took effect at once", p.Name)
	}
	require.Less(t, time.Since(flushed), time.Second, "the checks above ran too late to judge")
	time.Sleep(time.Until(flushed.Add(3 * time.Second)))
	for _, p := range procs {
		for _, q := range procs {
			require.False(t, get(p, "keep-"+q.Name), "%s still serves keep-%s after the delayed flush_all", p.Name, q.Name)
		}
	}
}
