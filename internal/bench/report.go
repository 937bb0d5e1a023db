package bench

import (
	"time"
)

// Report is everything one invocation measured; --json writes it as is.
type Report struct {
	Tool     string    `json:"tool"`
	Version  string    `json:"version"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	RunID    string    `json:"run_id"`
	Target   string    `json:"target"`
	Servers  []string  `json:"servers"`
	Workload Workload  `json:"workload"`
	Settings Settings  `json:"settings"`
	// Probe is each server as seen before the run (version, stats) and
	// ServersAfter the same after it.
	Probe        []ServerInfo `json:"probe"`
	ServersAfter []ServerInfo `json:"servers_after,omitempty"`
	// Preload is the untimed write of the key space before the cases.
	Preload *RunResult   `json:"preload,omitempty"`
	Cases   []CaseResult `json:"cases"`
	// Notes are problems that shaped the run (an unreachable server, an
	// interruption, cases skipped).
	Notes       []string `json:"notes,omitempty"`
	Interrupted bool     `json:"interrupted"`
	// Totals adds up every case's counts (preload and probe excluded).
	Totals Counts `json:"totals"`
	// ProbeErrors counts servers that did not answer the probe.
	ProbeErrors int64 `json:"probe_errors"`
}

// Settings are the knobs of the run that are not part of the workload.
type Settings struct {
	Concurrency []int   `json:"concurrency"`
	DurationS   float64 `json:"duration_s"`
	Repeat      int     `json:"repeat"`
	Rate        float64 `json:"rate"`
	Verify      bool    `json:"verify"`
	Timeline    bool    `json:"timeline"`
	Failover    bool    `json:"failover"`
	TimeoutS    float64 `json:"timeout_s"`
	MaxOps      int64   `json:"max_ops"`
	Seed        uint64  `json:"seed"`
}

// ServerInfo is what a server said about itself.
type ServerInfo struct {
	Addr  string            `json:"addr"`
	OK    bool              `json:"ok"`
	Error string            `json:"error,omitempty"`
	Info  map[string]string `json:"info,omitempty"`
}

// CaseResult is one concurrency level of one phase, over every repetition.
type CaseResult struct {
	// Phase is "run", or for import "load" then "read".
	Phase       string      `json:"phase"`
	Concurrency int         `json:"concurrency"`
	Runs        []RunResult `json:"runs"`
	Summary     Summary     `json:"summary"`
}

// Summary folds a case's repetitions: throughput as mean and spread,
// latency from the merged histograms, counts summed.
type Summary struct {
	OpsPerSec   Spread            `json:"ops_per_sec"`
	Latency     Latency           `json:"latency"`
	GetLatency  Latency           `json:"get_latency"`
	SetLatency  Latency           `json:"set_latency"`
	Percentiles []PercentilePoint `json:"percentiles,omitempty"`
	Counts      Counts            `json:"counts"`
	// Failover is the worst (longest) window over the repetitions.
	Failover *Failover `json:"failover,omitempty"`
}

// RunResult is one repetition of one case.
type RunResult struct {
	Repeat    int     `json:"repeat"`
	ElapsedS  float64 `json:"elapsed_s"`
	OpsPerSec float64 `json:"ops_per_sec"`
	Counts
	Latency    Latency         `json:"latency"`
	GetLatency Latency         `json:"get_latency"`
	SetLatency Latency         `json:"set_latency"`
	Timeline   []TimelinePoint `json:"timeline,omitempty"`
	Failover   *Failover       `json:"failover,omitempty"`
	// Complete is false when a finite phase (import, preload) ran out of
	// time or --max-ops before every record was attempted.
	Complete bool `json:"complete"`
	// Records is how many records a finite phase should have attempted.
	Records int `json:"records,omitempty"`

	get, set *Histogram
}

// summarize folds runs into a Summary.
func summarize(runs []RunResult) Summary {
	var s Summary
	xs := make([]float64, 0, len(runs))
	all, get, set := NewHistogram(), NewHistogram(), NewHistogram()
	for i := range runs {
		r := &runs[i]
		xs = append(xs, r.OpsPerSec)
		get.Merge(r.get)
		set.Merge(r.set)
		s.Counts.add(&r.Counts)
		if r.Failover != nil && (s.Failover == nil || r.Failover.LongestGapMs > s.Failover.LongestGapMs) {
			f := *r.Failover
			s.Failover = &f
		}
	}
	all.Merge(get)
	all.Merge(set)
	s.OpsPerSec = NewSpread(xs)
	s.Latency = Summarize(all)
	s.GetLatency = Summarize(get)
	s.SetLatency = Summarize(set)
	s.Percentiles = curve(all)
	return s
}
