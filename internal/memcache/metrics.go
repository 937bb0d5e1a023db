package memcache

import (
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/mcserver"
)

// Result classifies a memcache reply for the per-command counters.
type Result uint8

// Results a command can end with. A multi-key get or gat counts one hit or
// miss per key, as memcached's get_hits and get_misses do.
const (
	ResultHit Result = iota
	ResultMiss
	ResultStored
	ResultNotStored
	ResultExists
	ResultNotFound
	ResultDeleted
	ResultTouched
	ResultOK
	ResultClientError
	ResultServerError
	// ResultError is memcached's bare ERROR: a command it does not know.
	ResultError
	numResults
)

var resultNames = [numResults]string{
	"hit", "miss", "stored", "not_stored", "exists", "not_found", "deleted",
	"touched", "ok", "client_error", "server_error", "error",
}

func (r Result) String() string {
	if r < numResults {
		return resultNames[r]
	}
	return "invalid"
}

// numCommands sizes the per-command arrays, indexed by mcproto.Op; index
// 0 holds requests whose command is unknown.
const numCommands = int(mcproto.NumOps)

// LatencyBounds are the upper bounds of the per-command latency buckets:
// 25µs (a cached local read) to 5s (the default request timeout); the last
// bucket (+Inf) is implicit.
var LatencyBounds = [...]time.Duration{
	25 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond,
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
}

// latency is a fixed-bucket histogram updated with atomics only: the hot
// path must not take a lock or resolve a label per request.
type latency struct {
	buckets [len(LatencyBounds) + 1]atomic.Uint64
	sumNs   atomic.Int64
}

func (h *latency) observe(d time.Duration) {
	i := 0
	for i < len(LatencyBounds) && d > LatencyBounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sumNs.Add(int64(d))
}

// commandStats are the per-command counters and latencies. They live in
// arrays indexed by command and result so that counting is one atomic add
// at a fixed address; the metrics collector reads them at scrape time.
type commandStats struct {
	counts  [numCommands][numResults]atomic.Uint64
	latency [numCommands]latency
}

// countRejected counts a request the parser rejected in the general stats
// where memcached does (mcproto.Error.Counted).
func (s *Stats) countRejected(cmd mcproto.Op) {
	switch cmd {
	case mcproto.OpSet, mcproto.OpAdd, mcproto.OpReplace, mcproto.OpAppend, mcproto.OpPrepend, mcproto.OpCas, mcproto.OpMetaSet:
		s.CmdSet.Add(1)
	case mcproto.OpFlushAll:
		s.CmdFlush.Add(1)
	}
}

func (s *Stats) count(cmd mcproto.Op, r Result, n uint64) {
	if int(cmd) >= numCommands {
		cmd = 0
	}
	s.cmds.counts[cmd][r].Add(n)
}

func (s *Stats) observe(cmd mcproto.Op, d time.Duration) {
	if int(cmd) >= numCommands {
		cmd = 0
	}
	s.cmds.latency[cmd].observe(d)
}

// CommandStats is one command's counters as of a read.
type CommandStats struct {
	// Command is the command's name; "unknown" for requests memcached
	// answers with ERROR.
	Command string
	// Results counts replies by result; Possible says which results this
	// command can produce (the collector exposes those even while zero).
	Results  [numResults]uint64
	Possible [numResults]bool
	// Buckets are cumulative counts per LatencyBounds bound; Count and Sum
	// are the histogram's total count and summed latency.
	Buckets [len(LatencyBounds)]uint64
	Count   uint64
	Sum     time.Duration
}

// possibleResults lists what each command can answer; commands missing here
// (quit) are never counted.
var possibleResults = map[mcproto.Op][]Result{
	0:                    {ResultError, ResultClientError},
	mcproto.OpGet:        {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.OpGets:       {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.OpGat:        {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.OpGats:       {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.OpSet:        {ResultStored, ResultClientError, ResultServerError},
	mcproto.OpAdd:        {ResultStored, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.OpReplace:    {ResultStored, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.OpAppend:     {ResultStored, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.OpPrepend:    {ResultStored, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.OpCas:        {ResultStored, ResultExists, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.OpIncr:       {ResultHit, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.OpDecr:       {ResultHit, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.OpTouch:      {ResultTouched, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.OpDelete:     {ResultDeleted, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.OpFlushAll:   {ResultOK, ResultClientError, ResultServerError},
	mcproto.OpVersion:    {ResultOK},
	mcproto.OpVerbosity:  {ResultOK, ResultClientError},
	mcproto.OpStats:      {ResultOK, ResultError},
	mcproto.OpMetaGet:    {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.OpMetaSet:    {ResultStored, ResultNotStored, ResultExists, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.OpMetaDelete: {ResultDeleted, ResultNotFound, ResultExists, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.OpMetaArith:  {ResultHit, ResultNotFound, ResultExists, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.OpMetaDebug:  {ResultHit, ResultMiss, ResultClientError, ResultServerError},
}

// Commands returns the counters of every command kvd answers (in command
// order, the unknown command first). It reads atomics only, so it is safe
// from any goroutine while the server runs.
func (s *Stats) Commands() []CommandStats {
	out := make([]CommandStats, 0, numCommands)
	for i := range numCommands {
		cmd := mcproto.Op(i)
		possible, ok := possibleResults[cmd]
		if !ok {
			continue
		}
		cs := CommandStats{Command: "unknown"}
		if i != 0 {
			cs.Command = cmd.String()
		}
		for _, r := range possible {
			cs.Possible[r] = true
		}
		for r := range cs.Results {
			cs.Results[r] = s.cmds.counts[i][r].Load()
		}
		h := &s.cmds.latency[i]
		// The count is the sum of the buckets read, so the cumulative
		// counts never exceed it even while requests are being observed.
		var cum uint64
		for b := range cs.Buckets {
			cum += h.buckets[b].Load()
			cs.Buckets[b] = cum
		}
		cs.Count = cum + h.buckets[len(LatencyBounds)].Load()
		cs.Sum = time.Duration(h.sumNs.Load())
		out = append(out, cs)
	}
	return out
}

// ResultName names result r (index into CommandStats.Results).
func ResultName(r int) string { return Result(r).String() }

// Stats are the per-node counters the memcache `stats` command reports and
// the metrics collector reads: the listener's Counters (connections,
// bytes), memcached's command counters, and per-operation counters and
// latency histograms.
type Stats struct {
	mcserver.Counters
	CmdGet       atomic.Uint64
	CmdSet       atomic.Uint64
	CmdTouch     atomic.Uint64
	CmdFlush     atomic.Uint64
	GetHits      atomic.Uint64
	GetMisses    atomic.Uint64
	DeleteHits   atomic.Uint64
	DeleteMisses atomic.Uint64
	IncrHits     atomic.Uint64
	IncrMisses   atomic.Uint64
	DecrHits     atomic.Uint64
	DecrMisses   atomic.Uint64
	CasHits      atomic.Uint64
	CasMisses    atomic.Uint64
	CasBadval    atomic.Uint64
	TouchHits    atomic.Uint64
	TouchMisses  atomic.Uint64
	// CmdMeta counts meta commands (memcached's cmd_meta).
	CmdMeta atomic.Uint64
	// StoreTooLarge counts stores refused for a value over the item size
	// limit; StoreNoMemory, stores refused for want of disk space.
	StoreTooLarge atomic.Uint64
	StoreNoMemory atomic.Uint64
	TotalItems    atomic.Uint64
	ServerErrors  atomic.Uint64
	// AuthCmds counts authentication attempts, AuthErrors the failed
	// ones (memcached's auth_cmds and auth_errors).
	AuthCmds   atomic.Uint64
	AuthErrors atomic.Uint64

	cmds commandStats
}

func newStats() *Stats {
	s := &Stats{}
	s.Started = time.Now()
	return s
}
