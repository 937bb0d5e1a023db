package bench

import (
	"math"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Counts is what happened to the operations of one run. Every attempted
// operation ends as exactly one of a hit, a miss, an acknowledged set or an
// error, so Ops = Hits + Misses + Sets + Errors, and
// Errors = GetErrors + SetErrors.
type Counts struct {
	Ops       int64 `json:"ops"`
	Gets      int64 `json:"gets"` // attempted gets: Hits + Misses + GetErrors
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	SetTries  int64 `json:"set_attempts"` // attempted sets: Sets + SetErrors
	Sets      int64 `json:"sets"`         // acknowledged (STORED) sets
	Errors    int64 `json:"errors"`
	GetErrors int64 `json:"get_errors"`
	SetErrors int64 `json:"set_errors"`
	// ErrorsByKind counts Errors by their kind (see the Err* constants).
	ErrorsByKind map[string]int64 `json:"errors_by_kind,omitempty"`
	// ErrorSamples holds the first message seen of each kind.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	// ExpectedMisses are misses of keys the workload never wrote (the
	// intended miss ratio); UnexpectedMisses are misses of keys it wrote or
	// preloaded: missing values.
	ExpectedMisses   int64 `json:"expected_misses"`
	UnexpectedMisses int64 `json:"unexpected_misses"`
	// Verified hits had their checksum checked (--verify, import); Wrong
	// of them failed it.
	Verified int64 `json:"verified"`
	Wrong    int64 `json:"wrong"`
}

// add accumulates o into c.
func (c *Counts) add(o *Counts) {
	c.Ops += o.Ops
	c.Gets += o.Gets
	c.Hits += o.Hits
	c.Misses += o.Misses
	c.SetTries += o.SetTries
	c.Sets += o.Sets
	c.Errors += o.Errors
	c.GetErrors += o.GetErrors
	c.SetErrors += o.SetErrors
	c.ExpectedMisses += o.ExpectedMisses
	c.UnexpectedMisses += o.UnexpectedMisses
	c.Verified += o.Verified
	c.Wrong += o.Wrong
	for k, v := range o.ErrorsByKind {
		if c.ErrorsByKind == nil {
			c.ErrorsByKind = map[string]int64{}
		}
		c.ErrorsByKind[k] += v
	}
	for k, v := range o.ErrorSamples {
		if c.ErrorSamples == nil {
			c.ErrorSamples = map[string]string{}
		}
		if _, ok := c.ErrorSamples[k]; !ok {
			c.ErrorSamples[k] = v
		}
	}
}

// recordError counts one failed op of kind op.
func (c *Counts) recordError(kind OpKind, e *OpError) {
	c.Ops++
	c.Errors++
	if kind == OpGet {
		c.Gets++
		c.GetErrors++
	} else {
		c.SetTries++
		c.SetErrors++
	}
	if c.ErrorsByKind == nil {
		c.ErrorsByKind = map[string]int64{}
		c.ErrorSamples = map[string]string{}
	}
	c.ErrorsByKind[e.Kind]++
	if _, ok := c.ErrorSamples[e.Kind]; !ok {
		c.ErrorSamples[e.Kind] = truncate(e.Msg, 200)
	}
}

// truncate makes a server's message safe to print and bounded: control
// characters (a terminal's escape sequences) and invalid UTF-8 become "?",
// and the cut falls between characters.
func truncate(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// MissRatio is Misses / (Hits + Misses), 0 without answered gets.
func (c *Counts) MissRatio() float64 {
	if c.Hits+c.Misses == 0 {
		return 0
	}
	return float64(c.Misses) / float64(c.Hits+c.Misses)
}

// Spread summarises repeated measurements of one quantity.
type Spread struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	// SD is the sample standard deviation (n-1); 0 for a single value.
	SD  float64 `json:"sd"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// NewSpread computes mean, sample standard deviation and range of xs.
func NewSpread(xs []float64) Spread {
	s := Spread{N: len(xs)}
	if len(xs) == 0 {
		return s
	}
	s.Min, s.Max = math.Inf(1), math.Inf(-1)
	var sum float64
	for _, x := range xs {
		sum += x
		s.Min = math.Min(s.Min, x)
		s.Max = math.Max(s.Max, x)
	}
	s.Mean = sum / float64(len(xs))
	if len(xs) > 1 {
		var sq float64
		for _, x := range xs {
			sq += (x - s.Mean) * (x - s.Mean)
		}
		s.SD = math.Sqrt(sq / float64(len(xs)-1))
	}
	return s
}

// CV is the coefficient of variation SD/Mean (0 when Mean is 0).
func (s Spread) CV() float64 {
	if s.Mean == 0 {
		return 0
	}
	return s.SD / s.Mean
}

// Latency summarises a histogram, in microseconds.
type Latency struct {
	Count  uint64  `json:"count"`
	MinUs  float64 `json:"min_us"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	P90Us  float64 `json:"p90_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p99_9_us"`
	MaxUs  float64 `json:"max_us"`
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Summarize reads the report's percentiles off h.
func Summarize(h *Histogram) Latency {
	if h == nil || h.Count() == 0 {
		return Latency{}
	}
	return Latency{
		Count:  h.Count(),
		MinUs:  us(h.Min()),
		MeanUs: us(h.Mean()),
		P50Us:  us(h.Percentile(50)),
		P90Us:  us(h.Percentile(90)),
		P99Us:  us(h.Percentile(99)),
		P999Us: us(h.Percentile(99.9)),
		MaxUs:  us(h.Max()),
	}
}

// PercentilePoint is one point of a latency-by-percentile curve.
type PercentilePoint struct {
	Percentile float64 `json:"percentile"`
	Us         float64 `json:"us"`
}

var curvePercentiles = []float64{0, 10, 20, 30, 40, 50, 60, 70, 75, 80, 85, 90, 95, 97, 99, 99.5, 99.9, 99.95, 99.99, 99.999, 100}

// curve is h's latency-by-percentile curve (the HdrHistogram plot).
func curve(h *Histogram) []PercentilePoint {
	if h.Count() == 0 {
		return nil
	}
	out := make([]PercentilePoint, 0, len(curvePercentiles))
	for _, q := range curvePercentiles {
		v := h.Percentile(q)
		if q == 0 {
			v = h.Min()
		}
		out = append(out, PercentilePoint{Percentile: q, Us: us(v)})
	}
	return out
}

// TimelinePoint is one second of a run.
type TimelinePoint struct {
	Second int `json:"second"`
	// SpanS is the length of the bin: 1 except for the last, partial one.
	SpanS  float64 `json:"span_s"`
	Ops    int64   `json:"ops"`    // operations completed in that second, errors included
	Errors int64   `json:"errors"` // of which failed
	Writes int64   `json:"writes"` // acknowledged sets
}

// gap is a span of one worker without an acknowledged write, with the first
// failed write inside it (zero if none).
type gap struct {
	from, to time.Time
	firstErr time.Time
	open     bool // reaches the end of the run: no write after it
}

func (g gap) length() time.Duration { return g.to.Sub(g.from) }

// Failover describes the longest window in which no worker had a write
// acknowledged.
type Failover struct {
	// LongestGapMs is the length of that window: from the last
	// acknowledged write before it to the first one after it (or to the
	// end of the run when Recovered is false).
	LongestGapMs float64 `json:"longest_gap_ms"`
	GapStartS    float64 `json:"gap_start_s"` // since the run started
	// FirstErrorS is when the first write inside the window failed (since
	// the run started), -1 if none failed (writes merely stalled).
	FirstErrorS float64 `json:"first_error_s"`
	// RecoveryMs is the time from that first failed write to the first
	// acknowledged write after the window.
	RecoveryMs float64 `json:"recovery_ms"`
	Recovered  bool    `json:"recovered"`
	// AtLeast is true when a longer window may have been missed: a client
	// had more write gaps than it keeps, and let go of one longer than
	// this window. LongestGapMs is then a lower bound (0 when no window
	// was found among the gaps kept).
	AtLeast bool `json:"at_least,omitempty"`
}

// failoverFrom is the failover window of a run from its workers' kept
// gaps, dropped being the longest gap any of them let go: the true window
// lies in a gap of every worker, so one longer than the window found
// needs a dropped gap at least as long. Nil when there is no window.
func failoverFrom(start time.Time, perWorker [][]gap, dropped time.Duration) *Failover {
	f, ok := longestGap(start, perWorker)
	switch {
	case ok:
		f.AtLeast = float64(dropped)/float64(time.Millisecond) > f.LongestGapMs
		return &f
	case dropped > 0:
		return &Failover{FirstErrorS: -1, AtLeast: true}
	}
	return nil
}

// longestGap intersects the workers' write gaps: a window counts only when
// every worker was inside one of its own gaps.
func longestGap(start time.Time, perWorker [][]gap) (Failover, bool) {
	type event struct {
		t     time.Time
		delta int
		open  bool // the end of a gap that runs to the end of the run
	}
	var evs []event
	for _, gs := range perWorker {
		for _, g := range gs {
			evs = append(evs, event{t: g.from, delta: +1}, event{t: g.to, delta: -1, open: g.open})
		}
	}
	if len(perWorker) == 0 || len(evs) == 0 {
		return Failover{}, false
	}
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].t.Equal(evs[j].t) {
			return evs[i].t.Before(evs[j].t)
		}
		return evs[i].delta < evs[j].delta // close before open: touching gaps do not join
	})
	var best struct {
		from, to time.Time
		open     bool
	}
	found := false
	depth := 0
	var openedAt time.Time
	for _, e := range evs {
		depth += e.delta
		if e.delta > 0 && depth == len(perWorker) {
			openedAt = e.t
		}
		if e.delta < 0 && depth == len(perWorker)-1 {
			if !found || e.t.Sub(openedAt) > best.to.Sub(best.from) {
				best.from, best.to, best.open, found = openedAt, e.t, e.open, true
			}
		}
	}
	if !found {
		return Failover{}, false
	}
	f := Failover{
		LongestGapMs: float64(best.to.Sub(best.from)) / float64(time.Millisecond),
		GapStartS:    best.from.Sub(start).Seconds(),
		FirstErrorS:  -1,
		Recovered:    !best.open,
	}
	var firstErr time.Time
	for _, gs := range perWorker {
		for _, g := range gs {
			if g.to.Before(best.from) || g.from.After(best.to) {
				continue
			}
			if !g.firstErr.IsZero() && !g.firstErr.Before(best.from) && !g.firstErr.After(best.to) &&
				(firstErr.IsZero() || g.firstErr.Before(firstErr)) {
				firstErr = g.firstErr
			}
		}
	}
	if !firstErr.IsZero() {
		f.FirstErrorS = firstErr.Sub(start).Seconds()
		if f.Recovered {
			f.RecoveryMs = float64(best.to.Sub(firstErr)) / float64(time.Millisecond)
		}
	}
	return f, true
}
