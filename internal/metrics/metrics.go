// Package metrics owns one kvd node's Prometheus registry: namespace kvd,
// subsystems raft, fsm, storage, memcache and http, plus the Go runtime and
// process collectors. Nothing is registered globally or in init(): every node
// (several run in one test process) has its own Registry.
//
// Most values already live elsewhere as counters and status snapshots (the
// replica's Status, the state machine's and the raft log's Stats, the memcache
// listener's Stats); a collector reads them at scrape time, so the hot paths
// pay nothing for metrics. The memcache listener's per-command counters and
// latency histograms are fixed arrays of atomics in memcache.Stats, read the
// same way. Only the HTTP listener (ObserveHTTP, CountRequest, from its
// handler goroutines) and the raft log's fsync hook (SyncObserver, from the
// Ready loop) record into the registry directly.
//
// The composition root (internal/node) builds the Registry; the HTTP API
// serves Handler at /metrics.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/memcache"
	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/replica"
	"github.com/kvd-project/kvd/internal/version"
)

// Namespace prefixes every kvd metric.
const Namespace = "kvd"

// RaftSource is the replica as metrics reads it (kv.Service and
// replica.Replica both qualify).
type RaftSource interface{ Status() replica.Status }

// StoreSource is the state machine as metrics reads it (fsm.FSM).
type StoreSource interface{ Stats() fsm.Stats }

// LogSource is the raft log as metrics reads it (raftlog.Log).
type LogSource interface{ Stats() raftlog.Stats }

// Sources are what the node collector reads at scrape time. Raft and Store
// are required; Log and Memcache may be nil (their metrics are then absent).
type Sources struct {
	Raft     RaftSource
	Store    StoreSource
	Log      LogSource
	Memcache *memcache.Stats
	// LogSync, when set, is the histogram the raft log reports each fsync
	// to (raftlog.Options.ObserveSync); it then backs
	// kvd_raft_log_fsync_duration_seconds. Without it that metric is a
	// count-and-sum summary read from Log.
	LogSync *SyncObserver
	// Cluster, when set, adds snapshot and peer metrics.
	Cluster *ClusterSource
	// ClockSkew, when set, backs kvd_clock_skew_seconds
	// (clusterclock.Clock.Skew).
	ClockSkew func() time.Duration
}

// FsyncBuckets are the buckets of kvd_raft_log_fsync_duration_seconds: 50µs
// (a battery-backed cache) to 5s (a disk in trouble).
var FsyncBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// SyncObserver is the raft log fsync latency histogram. It exists before the
// Registry because the raft log is opened (and fsyncs) first.
type SyncObserver struct{ h prometheus.Histogram }

// NewSyncObserver builds the histogram; pass its Observe method as
// raftlog.Options.ObserveSync and the observer as Sources.LogSync.
func NewSyncObserver() *SyncObserver {
	return &SyncObserver{h: prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "raft", Name: "log_fsync_duration_seconds",
		Help:    "Time spent in each fsynced raft log batch commit.",
		Buckets: FsyncBuckets,
	})}
}

// Observe records one fsync. It is called with the raft log's lock held, so
// it only updates the histogram's atomics.
func (o *SyncObserver) Observe(d time.Duration) { o.h.Observe(d.Seconds()) }

// Registry is one node's metrics.
type Registry struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	httpInFlight prometheus.Gauge
	requests     *requestCounts
	memcache     *memcache.Stats

	// key-value route latency, for Totals
	kvCount atomic.Uint64
	kvSumNs atomic.Int64
}

// HTTPBuckets are the latency buckets of kvd_http_request_duration_seconds:
// 25µs (a read answered from the item cache) to 10s, the request timeout's
// range. Starting at 100µs put every cached read in the first bucket, where
// histogram_quantile cannot tell 20µs from 100µs.
var HTTPBuckets = []float64{.000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// New builds a node's registry over src.
func New(src Sources) *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests served, by route, method and status code.",
		}, []string{"route", "method", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time from reading an HTTP request's headers to finishing its response, by route and method.",
			Buckets: HTTPBuckets,
		}, []string{"route", "method"}),
		httpInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "http", Name: "requests_in_flight",
			Help: "HTTP requests being served now.",
		}),
		requests: &requestCounts{},
		memcache: src.Memcache,
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels name this binary's kvd and memcached-protocol versions.",
		ConstLabels: prometheus.Labels{"version": version.Version, "memcached_version": version.Memcached},
	})
	buildInfo.Set(1)
	r.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
		r.httpRequests, r.httpDuration, r.httpInFlight,
		newNodeCollector(src, r.requests),
	)
	if src.LogSync != nil {
		r.reg.MustRegister(src.LogSync.h)
	}
	if src.Cluster != nil {
		r.reg.MustRegister(newClusterCollector(*src.Cluster))
	}
	if src.ClockSkew != nil {
		r.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "clock_skew_seconds",
			Help: "The latest applied log stamp (the leader's clock) minus this member's clock when it was applied: positive when this member's clock is behind. " +
				"Expiry follows the log's time within 30s of skew; past that the member's own clock, so alert well before. After a restart it reads the replayed log's age until the next write.",
		}, func() float64 { return src.ClockSkew().Seconds() }))
	}
	return r
}

// Gatherer exposes the registry (for tests and the stats endpoint).
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		// A failing collector must not hide every other metric.
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
	})
}

// ObserveHTTP records one finished HTTP request. route and method must come
// from small fixed sets (the caller maps anything else to "other"): label
// values a client can choose would let it grow the registry without bound.
func (r *Registry) ObserveHTTP(route, method string, code int, d time.Duration) {
	r.httpRequests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	r.httpDuration.WithLabelValues(route, method).Observe(d.Seconds())
	if route == RouteKV || route == RouteKVList {
		r.kvCount.Add(1)
		r.kvSumNs.Add(int64(d))
	}
}

// Route labels of the key-value API, whose latency Totals reports.
const (
	RouteKV     = "kv"
	RouteKVList = "kv_list"
)

// Totals returns the console's running totals.
func (r *Registry) Totals() Totals {
	t := Totals{
		HTTPLatencyCount: r.kvCount.Load(),
		HTTPLatencySum:   time.Duration(r.kvSumNs.Load()).Seconds(),
	}
	r.requests.each(func(k requestKey, v uint64) {
		if k.protocol == "http" {
			t.HTTPRequests += v
		}
	})
	if m := r.memcache; m != nil {
		t.MemcacheCommands = m.CmdGet.Load() + m.CmdSet.Load() + m.CmdTouch.Load() + m.CmdFlush.Load() +
			m.DeleteHits.Load() + m.DeleteMisses.Load() + m.IncrHits.Load() + m.IncrMisses.Load() +
			m.DecrHits.Load() + m.DecrMisses.Load()
	}
	return t
}

// InFlightHTTP adds delta to the in-flight HTTP request gauge.
func (r *Registry) InFlightHTTP(delta int) { r.httpInFlight.Add(float64(delta)) }

// CountRequest counts one key-value request of protocol (only "http" is
// recorded this way; memcache counts come from memcache.Stats) by command
// and result, into kvd_requests_total. Values must come from fixed sets.
func (r *Registry) CountRequest(protocol, command, result string) {
	r.requests.add(requestKey{protocol, command, result})
}

type requestKey struct{ protocol, command, result string }

// requestCounts holds the directly-counted part of kvd_requests_total.
type requestCounts struct {
	m sync.Map // requestKey → *atomic.Uint64
}

func (c *requestCounts) add(k requestKey) {
	v, ok := c.m.Load(k)
	if !ok {
		v, _ = c.m.LoadOrStore(k, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1)
}

func (c *requestCounts) each(f func(requestKey, uint64)) {
	c.m.Range(func(k, v any) bool {
		f(k.(requestKey), v.(*atomic.Uint64).Load())
		return true
	})
}

// Totals are the few running totals the console charts (it derives rates
// from successive polls).
type Totals struct {
	// MemcacheCommands counts memcache commands: cmd_get, cmd_set, cmd_touch
	// and cmd_flush plus delete, incr and decr hits and misses.
	MemcacheCommands uint64 `json:"memcache_commands"`
	// HTTPRequests counts key-value requests over HTTP.
	HTTPRequests uint64 `json:"http_requests"`
	// HTTPLatencyCount and HTTPLatencySum are the count and the sum (seconds)
	// of kvd_http_request_duration_seconds over the key-value routes.
	HTTPLatencyCount uint64  `json:"http_latency_count"`
	HTTPLatencySum   float64 `json:"http_latency_sum_seconds"`
}
