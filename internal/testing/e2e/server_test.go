package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// rawConn is a line-level memcache client for exact-byte checks.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	_, err := io.WriteString(rc.c, s)
	require.NoError(rc.t, err)
}

func (rc *rawConn) line() string {
	rc.t.Helper()
	l, err := rc.r.ReadString('\n')
	require.NoError(rc.t, err)
	return strings.TrimSuffix(l, "\r\n")
}

// waitStat polls (bounded by within) until the general stat name reads
// want: counters that apply maintains move when the leader's sweeps land.
func (rc *rawConn) waitStat(name, want string, within time.Duration) {
	rc.t.Helper()
	deadline := time.Now().Add(within)
	for {
		// The connection's own deadline must not end the wait first.
		require.NoError(rc.t, rc.c.SetDeadline(time.Now().Add(30*time.Second)))
		got := rc.stat(name)
		if got == want {
			return
		}
		require.True(rc.t, time.Now().Before(deadline), "%s is %s after %v, want %s", name, got, within, want)
		time.Sleep(100 * time.Millisecond)
	}
}

// stat returns one general stat.
func (rc *rawConn) stat(name string) string {
	rc.t.Helper()
	rc.send("stats\r\n")
	val := ""
	for {
		l := rc.line()
		if l == "END" {
			return val
		}
		if f := strings.Fields(l); len(f) == 3 && f[1] == name {
			val = f[2]
		}
	}
}

func TestPipelinedRequestsAnswerInOrder(t *testing.T) {
	p := kvdproc.Start(t, t.TempDir())
	rc := dial(t, p.MemcacheAddr)
	var b strings.Builder
	const n = 200
	for i := range n {
		fmt.Fprintf(&b, "set p%d 0 0 %d\r\n%d\r\nget p%d\r\nincr p%d 1\r\n", i, len(strconv.Itoa(i)), i, i, i)
	}
	rc.send(b.String()) // one write: many commands in one read on the server
	for i := range n {
		require.Equal(t, "STORED", rc.line(), "set %d", i)
		require.Equal(t, fmt.Sprintf("VALUE p%d 0 %d", i, len(strconv.Itoa(i))), rc.line())
		require.Equal(t, strconv.Itoa(i), rc.line())
		require.Equal(t, "END", rc.line())
		require.Equal(t, strconv.Itoa(i+1), rc.line(), "incr %d", i)
	}
}

func TestExpiredItemsAreSweptThroughTheLog(t *testing.T) {
	p := kvdproc.Start(t, t.TempDir())
	rc := dial(t, p.MemcacheAddr)
	// Three seconds: the sweep must not take short before curr_items is read.
	rc.send("set short 0 3 1\r\nx\r\nset long 0 0 1\r\ny\r\n")
	require.Equal(t, "STORED", rc.line())
	require.Equal(t, "STORED", rc.line())
	require.Equal(t, "2", rc.stat("curr_items"))
	// The leader's sweep proposes the delete once the item is due.
	rc.waitStat("curr_items", "1", 15*time.Second)
	rc.send("get short long\r\n")
	require.Equal(t, "VALUE long 0 1", rc.line())
	require.Equal(t, "y", rc.line())
	require.Equal(t, "END", rc.line())
}

// A delayed flush_all hides what was stored before its time; once that time
// has come the leader's crawl deletes those items through the log, so that
// curr_items, bytes and the disk come down without each key being written.
func TestItemsADelayedFlushHidesAreDeleted(t *testing.T) {
	p := kvdproc.Start(t, t.TempDir())
	rc := dial(t, p.MemcacheAddr)
	for i := range 3 {
		rc.send(fmt.Sprintf("set old%d 0 0 3\r\nold\r\n", i))
		require.Equal(t, "STORED", rc.line())
	}
	rc.send("flush_all 1\r\n")
	require.Equal(t, "OK", rc.line())
	require.Equal(t, "3", rc.stat("curr_items"))
	// The crawl starts a request timeout (5 s) after the flush's time.
	rc.waitStat("curr_items", "0", 60*time.Second)
	require.Equal(t, "0", rc.stat("bytes"))
	rc.send("set new 0 0 3\r\nnew\r\nget old0 new\r\n")
	require.Equal(t, "STORED", rc.line())
	require.Equal(t, "VALUE new 0 3", rc.line())
	require.Equal(t, "new", rc.line())
	require.Equal(t, "END", rc.line())
}

func TestMaxConnectionsRefusedCleanly(t *testing.T) {
	p := kvdproc.Start(t, t.TempDir(), "--max-connections", "2")
	a, b := dial(t, p.MemcacheAddr), dial(t, p.MemcacheAddr)
	for _, rc := range []*rawConn{a, b} {
		rc.send("version\r\n")
		require.True(t, strings.HasPrefix(rc.line(), "VERSION "))
	}
	over := dial(t, p.MemcacheAddr)
	require.Equal(t, "ERROR Too many open connections", over.line())
	_, err := over.r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the refused connection is closed")

	// A slot freed is a slot reusable (the server notices the close
	// asynchronously: poll, bounded).
	require.NoError(t, a.c.Close())
	deadline := time.Now().Add(10 * time.Second)
	for {
		rc := dial(t, p.MemcacheAddr)
		rc.send("version\r\n")
		if l := rc.line(); strings.HasPrefix(l, "VERSION ") {
			break
		}
		require.True(t, time.Now().Before(deadline), "connection slot never freed")
		time.Sleep(50 * time.Millisecond)
	}
}

func TestBadConfigurationReportsEveryProblem(t *testing.T) {
	out, err := exec.Command(kvdproc.Binary(t), "serve", "--data-dir", t.TempDir(),
		"--max-item-size", "10", "--read-consistency", "sometimes", "--election-timeout", "100ms").CombinedOutput()
	require.Error(t, err)
	for _, want := range []string{"max-item-size", "read-consistency", "election-timeout"} {
		require.Contains(t, string(out), want)
	}
	out, err = exec.Command(kvdproc.Binary(t), "serve", "--max-item-size", "lots").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "max-item-size")
}

// mcClient is a gomemcache client for the tests: its default timeout (half
// a second) is shorter than a durable write can take on a loaded machine.
// Tests that want a shorter one set it after.
func mcClient(addr string) *memcache.Client {
	c := memcache.New(addr)
	c.Timeout = 10 * time.Second
	return c
}

// TestSecondKvdOnTheSameDataDirIsRefused: a second kvd started on a data
// dir in use exits with status 1 and says why; it was told "lock: resource
// temporarily unavailable", which names neither the cause nor the remedy.
func TestSecondKvdOnTheSameDataDirIsRefused(t *testing.T) {
	p := kvdproc.Start(t, t.TempDir())
	code, log := p.RunAgain(30 * time.Second)
	require.Equal(t, 1, code, "log:\n%s", log)
	require.Contains(t, log, "another kvd is running on this data dir")
}
