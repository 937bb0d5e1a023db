package mcserver

import (
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/mcproto"
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

// numCommands sizes the per-command arrays, indexed by mcproto.Command; index
// 0 holds requests whose command is unknown.
const numCommands = int(mcproto.CmdQuit) + 1

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
func (s *Stats) countRejected(cmd mcproto.Command) {
	switch cmd {
	case mcproto.CmdSet, mcproto.CmdAdd, mcproto.CmdReplace, mcproto.CmdAppend, mcproto.CmdPrepend, mcproto.CmdCas:
		s.CmdSet.Add(1)
	case mcproto.CmdFlushAll:
		s.CmdFlush.Add(1)
	}
}

func (s *Stats) count(cmd mcproto.Command, r Result, n uint64) {
	if int(cmd) >= numCommands {
		cmd = 0
	}
	s.cmds.counts[cmd][r].Add(n)
}

func (s *Stats) observe(cmd mcproto.Command, d time.Duration) {
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
var possibleResults = map[mcproto.Command][]Result{
	0:                    {ResultError, ResultClientError},
	mcproto.CmdGet:       {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.CmdGets:      {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.CmdGat:       {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.CmdGats:      {ResultHit, ResultMiss, ResultClientError, ResultServerError},
	mcproto.CmdSet:       {ResultStored, ResultClientError, ResultServerError},
	mcproto.CmdAdd:       {ResultStored, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.CmdReplace:   {ResultStored, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.CmdAppend:    {ResultStored, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.CmdPrepend:   {ResultStored, ResultNotStored, ResultClientError, ResultServerError},
	mcproto.CmdCas:       {ResultStored, ResultExists, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.CmdIncr:      {ResultHit, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.CmdDecr:      {ResultHit, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.CmdTouch:     {ResultTouched, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.CmdDelete:    {ResultDeleted, ResultNotFound, ResultClientError, ResultServerError},
	mcproto.CmdFlushAll:  {ResultOK, ResultClientError, ResultServerError},
	mcproto.CmdVersion:   {ResultOK},
	mcproto.CmdVerbosity: {ResultOK, ResultClientError},
	mcproto.CmdStats:     {ResultOK, ResultError},
}

// Commands returns the counters of every command kvd answers (in command
// order, the unknown command first). It reads atomics only, so it is safe
// from any goroutine while the server runs.
func (s *Stats) Commands() []CommandStats {
	out := make([]CommandStats, 0, numCommands)
	for i := range numCommands {
		cmd := mcproto.Command(i)
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
