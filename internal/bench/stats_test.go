package bench

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSpread(t *testing.T) {
	s := NewSpread([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if s.N != 8 || s.Mean != 5 || s.Min != 2 || s.Max != 9 {
		t.Fatalf("%+v", s)
	}
	if want := math.Sqrt(32.0 / 7); math.Abs(s.SD-want) > 1e-12 {
		t.Fatalf("sd %g, want %g (sample, n-1)", s.SD, want)
	}
	if math.Abs(s.CV()-s.SD/5) > 1e-12 {
		t.Fatalf("cv %g", s.CV())
	}
	if one := NewSpread([]float64{42}); one.Mean != 42 || one.SD != 0 || one.Min != 42 || one.Max != 42 {
		t.Fatalf("single: %+v", one)
	}
	if none := NewSpread(nil); none.N != 0 || none.Mean != 0 || none.CV() != 0 {
		t.Fatalf("empty: %+v", none)
	}
}

func TestCountsAddUp(t *testing.T) {
	var a, b Counts
	a.recordError(OpGet, &OpError{Kind: ErrTimeout, Msg: "t1"})
	a.recordError(OpSet, &OpError{Kind: ErrServer, Msg: "SERVER_ERROR out of memory"})
	b.recordError(OpSet, &OpError{Kind: ErrServer, Msg: "another"})
	b.Ops, b.Hits, b.Gets = b.Ops+2, 2, b.Gets+2
	a.add(&b)
	if a.Ops != 5 || a.Errors != 3 || a.GetErrors != 1 || a.SetErrors != 2 || a.Hits != 2 || a.Gets != 3 || a.SetTries != 2 {
		t.Fatalf("%+v", a)
	}
	if a.ErrorsByKind[ErrServer] != 2 || a.ErrorsByKind[ErrTimeout] != 1 || a.ErrorSamples[ErrServer] != "SERVER_ERROR out of memory" {
		t.Fatalf("by kind %v samples %v", a.ErrorsByKind, a.ErrorSamples)
	}
	checkCounts(t, "added", &a)
}

func TestSummarizeFoldsRepeats(t *testing.T) {
	mk := func(opsPerSec float64, lats ...time.Duration) RunResult {
		r := RunResult{OpsPerSec: opsPerSec, get: NewHistogram(), set: NewHistogram()}
		for _, l := range lats {
			r.get.Record(l)
			r.Ops++
			r.Gets++
			r.Hits++
		}
		return r
	}
	s := summarize([]RunResult{mk(100, time.Millisecond), mk(200, 2*time.Millisecond, 3*time.Millisecond), mk(300, 4*time.Millisecond)})
	if s.OpsPerSec.Mean != 200 || s.OpsPerSec.SD != 100 || s.OpsPerSec.N != 3 {
		t.Fatalf("ops/s %+v", s.OpsPerSec)
	}
	if s.Counts.Ops != 4 || s.Latency.Count != 4 || s.Latency.MaxUs != 4000 || s.Latency.MinUs != 1000 || s.Latency.MeanUs != 2500 {
		t.Fatalf("counts %+v latency %+v", s.Counts, s.Latency)
	}
	if p := s.Latency.P50Us; p < 2000 || p > 2000*(1+1.0/histSubCount) {
		t.Fatalf("p50 %gµs, want 2000µs", p)
	}
	if s.SetLatency.Count != 0 || s.GetLatency.Count != 4 || len(s.Percentiles) != len(curvePercentiles) {
		t.Fatalf("get/set split %+v %+v, curve %d", s.GetLatency, s.SetLatency, len(s.Percentiles))
	}
}

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	t.Run("intersection of two workers", func(t *testing.T) {
		// worker A: no writes 100..900, first failed write at 150.
		// worker B: no writes 300..1200, first failed write at 310.
		// Together: 300..900; the first failure inside it is B's at 310.
		f, ok := longestGap(t0, [][]gap{
			{{from: at(0), to: at(50)}, {from: at(100), to: at(900), firstErr: at(150)}},
			{{from: at(300), to: at(1200), firstErr: at(310)}},
		})
		if !ok || f.LongestGapMs != 600 || f.GapStartS != 0.3 || f.FirstErrorS != 0.31 || f.RecoveryMs != 590 || !f.Recovered {
			t.Fatalf("%+v %v", f, ok)
		}
	})
	t.Run("a worker that kept writing closes the window", func(t *testing.T) {
		_, ok := longestGap(t0, [][]gap{{{from: at(0), to: at(1000)}}, nil})
		if ok {
			t.Fatal("found a window although worker 2 never paused")
		}
	})
	t.Run("not recovered", func(t *testing.T) {
		f, ok := longestGap(t0, [][]gap{
			{{from: at(0), to: at(10)}, {from: at(500), to: at(2000), firstErr: at(600), open: true}},
			{{from: at(400), to: at(2000), open: true}},
		})
		if !ok || f.Recovered || f.LongestGapMs != 1500 || f.FirstErrorS != 0.6 || f.RecoveryMs != 0 {
			t.Fatalf("%+v", f)
		}
	})
	t.Run("longest of several, stalled without errors", func(t *testing.T) {
		f, ok := longestGap(t0, [][]gap{
			{{from: at(0), to: at(20)}, {from: at(100), to: at(400)}, {from: at(500), to: at(520)}},
		})
		if !ok || f.LongestGapMs != 300 || f.FirstErrorS != -1 || !f.Recovered {
			t.Fatalf("%+v", f)
		}
	})
}

// checkCounts asserts the identities every report's counts must satisfy.
func checkCounts(t *testing.T, what string, c *Counts) {
	t.Helper()
	if c.Ops != c.Hits+c.Misses+c.Sets+c.Errors {
		t.Errorf("%s: ops %d != hits %d + misses %d + sets %d + errors %d", what, c.Ops, c.Hits, c.Misses, c.Sets, c.Errors)
	}
	if c.Errors != c.GetErrors+c.SetErrors {
		t.Errorf("%s: errors %d != get errors %d + set errors %d", what, c.Errors, c.GetErrors, c.SetErrors)
	}
	if c.Gets != c.Hits+c.Misses+c.GetErrors {
		t.Errorf("%s: gets %d != hits + misses + get errors (%d)", what, c.Gets, c.Hits+c.Misses+c.GetErrors)
	}
	if c.SetTries != c.Sets+c.SetErrors {
		t.Errorf("%s: set attempts %d != sets %d + set errors %d", what, c.SetTries, c.Sets, c.SetErrors)
	}
	if c.Ops != c.Gets+c.SetTries {
		t.Errorf("%s: ops %d != gets %d + set attempts %d", what, c.Ops, c.Gets, c.SetTries)
	}
	if c.Misses != c.ExpectedMisses+c.UnexpectedMisses {
		t.Errorf("%s: misses %d != expected %d + unexpected %d", what, c.Misses, c.ExpectedMisses, c.UnexpectedMisses)
	}
	var byKind int64
	for _, n := range c.ErrorsByKind {
		byKind += n
	}
	if byKind != c.Errors {
		t.Errorf("%s: errors by kind sum to %d, errors %d", what, byKind, c.Errors)
	}
	if c.Verified > c.Hits || c.Wrong > c.Verified {
		t.Errorf("%s: verified %d wrong %d hits %d", what, c.Verified, c.Wrong, c.Hits)
	}
}

func TestTruncateMakesServerMessagesSafeToPrint(t *testing.T) {
	tests := []struct {
		name, in string
		n        int
		want     string
	}{
		{"plain", "SERVER_ERROR out of memory", 200, "SERVER_ERROR out of memory"},
		{"terminal escape", "SERVER_ERROR \x1b[2Jgone", 200, "SERVER_ERROR ?[2Jgone"},
		{"invalid UTF-8", "SERVER_ERROR \xff\xfe", 200, "SERVER_ERROR ?"},
		{"cut", "abcdef", 3, "abc…"},
		{"cut inside a character", "ab\u00e9cd", 3, "ab…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, truncate(tt.in, tt.n))
		})
	}
}
