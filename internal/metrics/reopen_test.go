package metrics_test

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/metrics"
	"github.com/kvd-project/kvd/internal/replica"
)

// mutableStore is a state store whose stats a test changes between scrapes.
type mutableStore struct {
	mu sync.Mutex
	st fsm.Stats
}

func (s *mutableStore) Stats() fsm.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *mutableStore) set(st fsm.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = st
}

// A snapshot install reopens Pebble, whose block and file cache counters
// then restart at 0; the exposed counters must not go down with them (a
// counter that drops mid-process reads as a reset and rate() invents a
// spike or loses the history).
func TestPebbleCountersSurviveStoreReopen(t *testing.T) {
	store := &mutableStore{}
	r := metrics.New(metrics.Sources{
		Raft:  fakeRaft{replica.Status{ID: 1, Leader: 1, Role: "leader", Voters: []replica.NodeID{1}, Ready: true}},
		Store: store,
	})
	read := func(name string) float64 {
		t.Helper()
		fams, err := r.Gatherer().Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == name {
				require.Len(t, f.GetMetric(), 1)
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("%s not exposed", name)
		return 0
	}
	steps := []struct {
		name                     string
		gen                      uint64
		blockHits, blockMiss     int64
		fileHits, fileMiss       int64
		wantBlockHits, wantFileM float64
	}{
		{"before the install", 1, 100, 10, 50, 5, 100, 5},
		{"more traffic", 1, 150, 12, 60, 7, 150, 7},
		// Stats serves the last figures read while an install holds the
		// store, and two callers may have stored them out of order: an
		// older, lower figure of the same store is no reopen.
		{"an older figure served late", 1, 140, 11, 55, 6, 150, 7},
		{"no store read", 0, 0, 0, 0, 0, 150, 7},
		{"store reopened", 2, 3, 1, 2, 1, 153, 8},
		{"traffic after", 2, 30, 4, 9, 3, 180, 10},
		{"reopened again", 3, 0, 0, 0, 0, 180, 10},
		{"traffic again", 3, 5, 1, 1, 1, 185, 11},
		// A reopen whose new store counted past the old one by the next
		// scrape: a drop would not show it, the generation does.
		{"reopened, busy at once", 4, 500, 40, 90, 30, 685, 41},
	}
	for _, s := range steps {
		store.set(fsm.Stats{StoreGen: s.gen, BlockCacheHits: s.blockHits, BlockCacheMisses: s.blockMiss,
			FileCacheHits: s.fileHits, FileCacheMisses: s.fileMiss})
		require.Equal(t, s.wantBlockHits, read("kvd_storage_block_cache_hits_total"), s.name)
		require.Equal(t, s.wantFileM, read("kvd_storage_file_cache_misses_total"), s.name)
	}
}

// Key-value requests answered from memory take tens of microseconds: the
// request histogram must tell 20µs from 90µs, not lump both into its first
// bucket.
func TestHTTPBucketsResolveFastRequests(t *testing.T) {
	r := newTestRegistry()
	for _, d := range []time.Duration{20 * time.Microsecond, 40 * time.Microsecond, 90 * time.Microsecond} {
		r.ObserveHTTP(metrics.RouteKV, "GET", 200, d)
	}
	fams, err := r.Gatherer().Gather()
	require.NoError(t, err)
	got := map[float64]uint64{}
	for _, f := range fams {
		if f.GetName() == "kvd_http_request_duration_seconds" {
			for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
				got[b.GetUpperBound()] = b.GetCumulativeCount()
			}
		}
	}
	for le, want := range map[float64]uint64{.000025: 1, .00005: 2, .0001: 3} {
		n, ok := got[le]
		require.True(t, ok, "no bucket le=%v", le)
		require.Equal(t, want, n, "le=%v", le)
	}
}

// gatedStore counts up its Pebble counters on every read; the first read
// waits for release, so that a second scrape can read while it is held.
type gatedStore struct {
	mu      sync.Mutex
	calls   int
	entered chan struct{}
	release chan struct{}
}

func (s *gatedStore) Stats() fsm.Stats {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if n == 1 {
		close(s.entered)
		<-s.release
	}
	v := int64(99 + n) // 100, 101, 102...
	return fsm.Stats{StoreGen: 1, BlockCacheHits: v, BlockCacheMisses: v, FileCacheHits: v, FileCacheMisses: v}
}

// blockedInCollect reports whether a goroutine waits for a mutex inside the
// node collector's Collect.
func blockedInCollect() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*nodeCollector).Collect") && strings.Contains(g, "SemacquireMutex") {
			return true
		}
	}
	return false
}

// Two scrapes at once (an HA pair of Prometheus servers, or a curl beside
// one) may read the store in one order and fold its Pebble counters into
// the monotonic ones in the other. The later fold then saw a value below the
// last one, took it for a store reopen, and added the whole count to the
// base again: the counter doubled, and rate() drew a spike as high as the
// node's lifetime total.
func TestPebbleCountersUnderConcurrentScrapes(t *testing.T) {
	store := &gatedStore{entered: make(chan struct{}), release: make(chan struct{})}
	r := metrics.New(metrics.Sources{
		Raft:  fakeRaft{replica.Status{ID: 1, Leader: 1, Role: "leader", Voters: []replica.NodeID{1}, Ready: true}},
		Store: store,
	})
	read := func() (float64, error) {
		fams, err := r.Gatherer().Gather()
		if err != nil {
			return 0, err
		}
		for _, f := range fams {
			if f.GetName() == "kvd_storage_block_cache_hits_total" {
				return f.GetMetric()[0].GetCounter().GetValue(), nil
			}
		}
		return 0, nil
	}
	type result struct {
		v   float64
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go func() { v, err := read(); first <- result{v, err} }()
	<-store.entered // the first scrape has read nothing yet
	var secondDone atomic.Bool
	go func() { v, err := read(); secondDone.Store(true); second <- result{v, err} }()
	// The second scrape either reads the store and finishes while the first
	// one is held, or waits for it.
	require.Eventually(t, func() bool { return secondDone.Load() || blockedInCollect() },
		30*time.Second, time.Millisecond)
	close(store.release)
	a, b := <-first, <-second
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	// Three reads of 100, 101 and 102 hits: no scrape may show more.
	require.LessOrEqual(t, max(a.v, b.v), 101.0, "scrapes showed %v and %v", a.v, b.v)
	v, err := read()
	require.NoError(t, err)
	require.Equal(t, 102.0, v)
}
