package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/metrics"
	"github.com/kvd-project/kvd/internal/node"
)

// startNode runs a real single-member node on loopback ports and waits until
// it is ready (the test binary's -timeout bounds the wait).
func startNode(t *testing.T) *node.Node {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "n1"
	cfg.DataDir = t.TempDir()
	cfg.MemcacheAddr, cfg.HTTPAddr, cfg.PeerAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	n, err := node.Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
	})
	// Ready, and its own addresses published: a node proposes them into
	// the member table once it is ready, and a test that counts proposals
	// in flight must not race with that one.
	published := func() bool {
		m, ok := n.Member(node.IDOf(cfg.Name))
		return ok && m.HTTPAddr == n.HTTPAddr()
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !n.KV().Status().Ready || !published() {
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal("test ended before the node was ready and published")
		}
	}
	return n
}

// scrape fetches and parses a node's /metrics.
func scrape(t *testing.T, n *node.Node) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value returns the value of the series of family name whose labels include
// labels (k, v pairs); histograms and summaries give their sample count.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "metric %s not exposed", name)
	var found []float64
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels...) {
			continue
		}
		switch {
		case m.Counter != nil:
			found = append(found, m.GetCounter().GetValue())
		case m.Gauge != nil:
			found = append(found, m.GetGauge().GetValue())
		case m.Histogram != nil:
			found = append(found, float64(m.GetHistogram().GetSampleCount()))
		case m.Summary != nil:
			found = append(found, float64(m.GetSummary().GetSampleCount()))
		default:
			found = append(found, m.GetUntyped().GetValue())
		}
	}
	require.Len(t, found, 1, "want exactly one series %s%v", name, labels)
	return found[0]
}

// valueOr0 is value for a series that may not exist yet.
func valueOr0(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		return 0
	}
	for _, m := range f.GetMetric() {
		if hasLabels(m, labels...) {
			return value(t, fams, name, labels...)
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, labels ...string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		ok := false
		for _, lp := range m.GetLabel() {
			ok = ok || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
		}
		if !ok {
			return false
		}
	}
	return true
}

// mcDo sends one request and reads the reply up to its final line.
func mcDo(t *testing.T, rw *bufio.ReadWriter, req, last string) string {
	t.Helper()
	_, err := rw.WriteString(req)
	require.NoError(t, err)
	require.NoError(t, rw.Flush())
	var out strings.Builder
	for {
		line, err := rw.ReadString('\n')
		require.NoError(t, err)
		out.WriteString(line)
		if strings.HasPrefix(line, last) {
			return out.String()
		}
	}
}

func TestMetricsMoveWithTraffic(t *testing.T) {
	n := startNode(t)
	before := scrape(t, n)

	// HTTP traffic: 5 puts, 5 hits, 2 misses, a bad request.
	base := "http://" + n.HTTPAddr()
	for i := range 5 {
		req, err := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/v1/kv/h%d", base, i), strings.NewReader("value"))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		resp, err = http.Get(fmt.Sprintf("%s/v1/kv/h%d", base, i))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	for _, path := range []string{"/v1/kv/nope", "/v1/kv/nope2", "/v1/kv/bad%20key"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
	}

	// Memcache traffic on one open connection.
	nc, err := net.Dial("tcp", n.MemcacheAddr())
	require.NoError(t, err)
	defer nc.Close()
	rw := bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))
	require.Equal(t, "STORED\r\n", mcDo(t, rw, "set m1 0 0 3\r\nabc\r\n", "STORED"))
	require.Contains(t, mcDo(t, rw, "get m1\r\n", "END"), "abc")
	mcDo(t, rw, "get missing\r\n", "END")
	require.Equal(t, "DELETED\r\n", mcDo(t, rw, "delete m1\r\n", "DELETED"))
	require.Equal(t, "NOT_FOUND\r\n", mcDo(t, rw, "incr m1 1\r\n", "NOT_FOUND"))

	after := scrape(t, n)
	moved := func(name string, by float64, labels ...string) {
		t.Helper()
		d := valueOr0(t, after, name, labels...) - valueOr0(t, before, name, labels...)
		require.Equal(t, by, d, "%s%v moved by %v", name, labels, d)
	}
	moved("kvd_requests_total", 5, "protocol", "http", "command", "put", "result", "stored")
	moved("kvd_requests_total", 5, "protocol", "http", "command", "get", "result", "hit")
	moved("kvd_requests_total", 2, "protocol", "http", "command", "get", "result", "miss")
	moved("kvd_requests_total", 1, "protocol", "http", "command", "get", "result", "bad_request")
	moved("kvd_requests_total", 1, "protocol", "memcache", "command", "get", "result", "hit")
	moved("kvd_requests_total", 1, "protocol", "memcache", "command", "get", "result", "miss")
	moved("kvd_requests_total", 1, "protocol", "memcache", "command", "delete", "result", "hit")
	moved("kvd_requests_total", 1, "protocol", "memcache", "command", "incr", "result", "miss")
	moved("kvd_memcache_commands_total", 1, "command", "set", "result", "stored")
	moved("kvd_memcache_commands_total", 1, "command", "get", "result", "hit")
	moved("kvd_memcache_commands_total", 1, "command", "get", "result", "miss")
	moved("kvd_memcache_connections_total", 1)
	moved("kvd_memcache_items_stored_total", 1)
	moved("kvd_http_requests_total", 5, "route", "kv", "method", "PUT", "code", "204")
	moved("kvd_http_requests_total", 1, "route", "kv", "method", "GET", "code", "400")
	// The histogram moved: its count, and its sum.
	moved("kvd_http_request_duration_seconds", 5, "route", "kv", "method", "PUT")
	moved("kvd_http_request_duration_seconds", 8, "route", "kv", "method", "GET")
	h := after["kvd_http_request_duration_seconds"]
	for _, m := range h.GetMetric() {
		if hasLabels(m, "route", "kv", "method", "PUT") {
			require.Positive(t, m.GetHistogram().GetSampleSum())
			b := m.GetHistogram().GetBucket()
			require.Len(t, b, len(metrics.HTTPBuckets)+1, "the buckets and +Inf")
			require.Equal(t, m.GetHistogram().GetSampleCount(), b[len(b)-1].GetCumulativeCount())
		}
	}

	require.InDelta(t, 1, value(t, after, "kvd_memcache_connections"), 0, "the test's connection is open")
	require.Positive(t, value(t, after, "kvd_memcache_read_bytes_total"))
	require.Positive(t, value(t, after, "kvd_memcache_written_bytes_total"))

	// Raft: a leader, and the writes went through the log (6 sets, 1 delete).
	require.Equal(t, 1.0, value(t, after, "kvd_raft_has_leader"))
	require.Equal(t, 1.0, value(t, after, "kvd_raft_is_leader"))
	require.Equal(t, 1.0, value(t, after, "kvd_raft_ready"))
	require.Equal(t, 1.0, value(t, after, "kvd_raft_role", "role", "leader"))
	require.Equal(t, 0.0, value(t, after, "kvd_raft_role", "role", "follower"))
	require.Equal(t, 1.0, value(t, after, "kvd_raft_members", "kind", "voter"))
	require.GreaterOrEqual(t, value(t, after, "kvd_raft_term"), 1.0)
	require.GreaterOrEqual(t, value(t, after, "kvd_raft_leader_changes_total"), 1.0)
	require.GreaterOrEqual(t, value(t, after, "kvd_raft_commit_index")-value(t, before, "kvd_raft_commit_index"), 7.0)
	require.GreaterOrEqual(t, value(t, after, "kvd_fsm_applied_index")-value(t, before, "kvd_fsm_applied_index"), 7.0)
	require.GreaterOrEqual(t, value(t, after, "kvd_raft_log_fsync_duration_seconds")-value(t, before, "kvd_raft_log_fsync_duration_seconds"), 1.0)
	require.GreaterOrEqual(t, value(t, after, "kvd_raft_log_last_index"), value(t, after, "kvd_raft_commit_index"))
	require.Equal(t, 0.0, value(t, after, "kvd_raft_proposals_pending"))
	require.GreaterOrEqual(t, value(t, after, "kvd_raft_proposals_applied_total")-value(t, before, "kvd_raft_proposals_applied_total"), 7.0)
	require.Equal(t, 0.0, value(t, after, "kvd_raft_proposals_failed_total"))
	// A lone voter reads its own state: no ReadIndex round for the gets.
	require.Equal(t, 0.0, value(t, after, "kvd_raft_read_index_rounds_total"))
	require.Equal(t, 0.0, value(t, after, "kvd_raft_read_index_reads_total"))

	// Storage: 5 HTTP items (m1 was deleted), 25 value bytes.
	require.Equal(t, 5.0, value(t, after, "kvd_storage_items"))
	require.Equal(t, 25.0, value(t, after, "kvd_storage_value_bytes"))
	require.Positive(t, value(t, after, "kvd_storage_disk_usage_bytes", "store", "state"))
	require.Positive(t, value(t, after, "kvd_storage_disk_usage_bytes", "store", "raft"))
	// Exposed; their values depend on Pebble's caching and flushes.
	for _, name := range []string{"kvd_storage_compaction_debt_bytes", "kvd_storage_block_cache_hits_total",
		"kvd_storage_block_cache_misses_total", "kvd_storage_open_files",
		"kvd_storage_file_cache_hits_total", "kvd_storage_file_cache_misses_total"} {
		value(t, after, name, "store", "state") // fails unless exactly one series
	}
	require.GreaterOrEqual(t, value(t, after, "kvd_raft_log_segments"), 1.0)
	// The store's file cache: its bound comes from this process's open-file
	// limit, within kvd's bounds (a soft bound: files in use stay open).
	limit := value(t, after, "kvd_storage_open_files_limit", "store", "state")
	require.GreaterOrEqual(t, limit, 1000.0)
	require.LessOrEqual(t, limit, 10000.0)
	require.Equal(t, 0.0, value(t, after, "kvd_raft_log_compactions_total"), "7 entries are far below any compaction trigger")

	// Runtime and process collectors, and build info.
	require.Positive(t, value(t, after, "go_goroutines"))
	require.Positive(t, value(t, after, "process_resident_memory_bytes"))
	require.Equal(t, 1.0, value(t, after, "kvd_build_info"))
}
