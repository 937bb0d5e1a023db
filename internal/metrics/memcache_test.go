package metrics_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/memcache"
	"github.com/kvd-project/kvd/internal/metrics"
	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/replica"
)

// TestMemcacheCommandMetrics drives every kind of memcache reply and checks
// the per-command counters and latency histograms moved by exactly that.
func TestMemcacheCommandMetrics(t *testing.T) {
	n := startNode(t)
	before := scrape(t, n)

	nc, err := net.Dial("tcp", n.MemcacheAddr())
	require.NoError(t, err)
	defer nc.Close()
	rw := bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))
	for _, x := range []struct{ req, last string }{
		{"set a 0 0 1\r\n1\r\n", "STORED"},
		{"set b 0 0 1 noreply\r\n2\r\nget a b c\r\n", "END"}, // 2 hits, 1 miss
		{"add a 0 0 1\r\nx\r\n", "NOT_STORED"},
		{"gets a\r\n", "END"},
		{"cas a 0 0 1 1\r\nz\r\n", "EXISTS"},
		{"cas nope 0 0 1 1\r\nz\r\n", "NOT_FOUND"},
		{"incr a 5\r\n", "6"},
		{"incr nope 5\r\n", "NOT_FOUND"},
		{"set s 0 0 1\r\nq\r\nincr s 1\r\n", "CLIENT_ERROR"},
		{"touch a 0\r\n", "TOUCHED"},
		{"delete a\r\n", "DELETED"},
		{"delete a\r\n", "NOT_FOUND"},
		{"bogus\r\n", "ERROR"},
		{"stats nope\r\n", "ERROR"},
		{"version\r\n", "VERSION"},
	} {
		mcDo(t, rw, x.req, x.last)
	}

	after := scrape(t, n)
	moved := func(by float64, command, result string) {
		t.Helper()
		l := []string{"command", command, "result", result}
		d := valueOr0(t, after, "kvd_memcache_commands_total", l...) - valueOr0(t, before, "kvd_memcache_commands_total", l...)
		require.Equal(t, by, d, "kvd_memcache_commands_total{command=%q,result=%q}", command, result)
	}
	moved(3, "set", "stored") // a, b (noreply still counts), s
	moved(2, "get", "hit")
	moved(1, "get", "miss")
	moved(1, "add", "not_stored")
	moved(1, "gets", "hit")
	moved(1, "cas", "exists")
	moved(1, "cas", "not_found")
	moved(1, "incr", "hit")
	moved(1, "incr", "not_found")
	moved(1, "incr", "client_error")
	moved(1, "touch", "touched")
	moved(1, "delete", "deleted")
	moved(1, "delete", "not_found")
	moved(1, "unknown", "error")
	moved(1, "stats", "error")
	moved(1, "version", "ok")
	// Results a command can give are exposed before they happen.
	require.Contains(t, seriesLabels(before["kvd_memcache_commands_total"]), "replace/not_stored")

	// The latency histograms: one observation per request (a multi-get is
	// one request), in buckets that add up.
	hist := func(fams map[string]*dto.MetricFamily, command string) *dto.Histogram {
		for _, m := range fams["kvd_memcache_command_duration_seconds"].GetMetric() {
			if hasLabels(m, "command", command) {
				return m.GetHistogram()
			}
		}
		t.Fatalf("no latency histogram for %s", command)
		return nil
	}
	for cmd, want := range map[string]uint64{"set": 3, "get": 1, "incr": 3, "delete": 2, "version": 1} {
		h0, h1 := hist(before, cmd), hist(after, cmd)
		require.Equal(t, want, h1.GetSampleCount()-h0.GetSampleCount(), cmd)
		require.Greater(t, h1.GetSampleSum(), h0.GetSampleSum(), cmd)
		b := h1.GetBucket()
		require.Len(t, b, len(memcache.LatencyBounds)+1, "the buckets and +Inf")
		require.Equal(t, h1.GetSampleCount(), b[len(b)-1].GetCumulativeCount())
	}
	// A write waits for its fsync; its mean latency is above the bucket floor.
	h := hist(after, "set")
	require.Greater(t, h.GetSampleSum()/float64(h.GetSampleCount()), memcache.LatencyBounds[0].Seconds()/10)
}

func seriesLabels(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var cmd, res string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "command":
				cmd = l.GetValue()
			case "result":
				res = l.GetValue()
			}
		}
		out = append(out, cmd+"/"+res)
	}
	return out
}

// TestFsyncHistogram: with a SyncObserver, the fsync metric is a histogram
// of every observed fsync, and the registry still passes promlint.
func TestFsyncHistogram(t *testing.T) {
	obs := metrics.NewSyncObserver()
	r := metrics.New(metrics.Sources{
		Raft:     fakeRaft{replica.Status{ID: 1, Leader: 1, Role: "leader", Voters: []replica.NodeID{1}, Ready: true}},
		Store:    fakeStore{fsm.Stats{}},
		Log:      fakeLog{raftlog.Stats{SyncCount: 3, SyncDuration: time.Second}},
		Memcache: &memcache.Stats{},
		LogSync:  obs,
	})
	obs.Observe(200 * time.Microsecond)
	obs.Observe(3 * time.Millisecond)
	obs.Observe(2 * time.Second)
	fams, err := r.Gatherer().Gather()
	require.NoError(t, err)
	var h *dto.Histogram
	for _, f := range fams {
		if f.GetName() == "kvd_raft_log_fsync_duration_seconds" {
			require.Equal(t, dto.MetricType_HISTOGRAM, f.GetType())
			require.Len(t, f.GetMetric(), 1)
			h = f.GetMetric()[0].GetHistogram()
		}
	}
	require.NotNil(t, h)
	require.Equal(t, uint64(3), h.GetSampleCount())
	require.InDelta(t, 2.0032, h.GetSampleSum(), 1e-9)
	for _, b := range h.GetBucket() {
		switch b.GetUpperBound() {
		case .00025:
			require.Equal(t, uint64(1), b.GetCumulativeCount())
		case .005:
			require.Equal(t, uint64(2), b.GetCumulativeCount())
		case 2.5:
			require.Equal(t, uint64(3), b.GetCumulativeCount())
		}
	}
	problems, err := testutil.GatherAndLint(r.Gatherer())
	require.NoError(t, err)
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "kvd_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}
