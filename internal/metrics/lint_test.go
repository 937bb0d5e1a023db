package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/memcache"
	"github.com/kvd-project/kvd/internal/metrics"
	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/replica"
)

type fakeRaft struct{ st replica.Status }

func (f fakeRaft) Status() replica.Status { return f.st }

type fakeStore struct{ st fsm.Stats }

func (f fakeStore) Stats() fsm.Stats { return f.st }

type fakeLog struct{ st raftlog.Stats }

func (f fakeLog) Stats() raftlog.Stats { return f.st }

func newTestRegistry() *metrics.Registry {
	mc := &memcache.Stats{}
	mc.CmdGet.Add(3)
	mc.GetHits.Add(2)
	mc.GetMisses.Add(1)
	return metrics.New(metrics.Sources{
		Raft: fakeRaft{replica.Status{ID: 1, Leader: 1, Role: "leader", Term: 2, Commit: 9, Applied: 9,
			Voters: []replica.NodeID{1, 2, 3}, Ready: true, LeaderChanges: 1}},
		Store:    fakeStore{fsm.Stats{Applied: 9, Items: 4, Bytes: 40, DiskBytes: 4096}},
		Log:      fakeLog{raftlog.Stats{SyncCount: 10, SyncDuration: 20 * time.Millisecond, FirstIndex: 1, LastIndex: 9}},
		Memcache: mc,
	})
}

// Every kvd metric passes promlint (names, units, _total on counters, help).
func TestNamesFollowConventions(t *testing.T) {
	r := newTestRegistry()
	r.ObserveHTTP("kv", "GET", 200, time.Millisecond)
	r.CountRequest("http", "get", "hit")
	problems, err := testutil.GatherAndLint(r.Gatherer())
	require.NoError(t, err)
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "kvd_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
	families, err := r.Gatherer().Gather()
	require.NoError(t, err)
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			require.True(t, strings.HasPrefix(name, "kvd_"), "%s is outside the kvd namespace", name)
		}
	}
}

func TestTotals(t *testing.T) {
	r := newTestRegistry()
	r.ObserveHTTP(metrics.RouteKV, "GET", 200, 2*time.Millisecond)
	r.ObserveHTTP(metrics.RouteKVList, "GET", 200, 4*time.Millisecond)
	r.ObserveHTTP("metrics", "GET", 200, time.Second) // not a key-value route
	r.CountRequest("http", "get", "hit")
	r.CountRequest("http", "put", "stored")
	r.CountRequest("http", "put", "stored")
	got := r.Totals()
	require.Equal(t, metrics.Totals{MemcacheCommands: 3, HTTPRequests: 3, HTTPLatencyCount: 2, HTTPLatencySum: 0.006}, got)
}

// Two registries in one process do not collide (no global registration).
func TestRegistriesAreIndependent(t *testing.T) {
	a, b := newTestRegistry(), newTestRegistry()
	a.CountRequest("http", "get", "hit")
	fa, err := a.Gatherer().Gather()
	require.NoError(t, err)
	fb, err := b.Gatherer().Gather()
	require.NoError(t, err)
	require.Equal(t, len(fa), len(fb))
}
