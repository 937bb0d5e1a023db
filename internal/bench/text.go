package bench

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the final human-readable report: a header, one table
// row per case, errors by kind, verification, failover and notes.
func WriteText(out io.Writer, rep *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s · target %s · servers %s · run %s\n", rep.Tool, rep.Version, rep.Target, strings.Join(rep.Servers, ","), rep.RunID)
	fmt.Fprintf(&b, "workload %s\n", rep.Workload.Describe())
	s := rep.Settings
	fmt.Fprintf(&b, "%v per case × %d, concurrency %s, timeout %v", time.Duration(s.DurationS*float64(time.Second)),
		s.Repeat, joinInts(s.Concurrency), time.Duration(s.TimeoutS*float64(time.Second)))
	if s.Rate > 0 {
		fmt.Fprintf(&b, ", rate %s ops/s", formatCount(s.Rate))
	}
	if s.Verify {
		b.WriteString(", verify")
	}
	b.WriteString("\n")
	for _, p := range rep.Probe {
		if p.OK {
			fmt.Fprintf(&b, "server %s: %s\n", p.Addr, describeInfo(p.Info))
		}
	}
	if p := rep.Preload; p != nil {
		// Acknowledged sets only: p.OpsPerSec counts failed sets too.
		var setsPerSec float64
		if p.ElapsedS > 0 {
			setsPerSec = float64(p.Sets) / p.ElapsedS
		}
		fmt.Fprintf(&b, "preload: %s of %s keys in %.2fs (%s sets/s), %d errors\n",
			formatCount(float64(p.Sets)), formatCount(float64(p.Records)), p.ElapsedS, formatCount(setsPerSec), p.Errors)
	}
	b.WriteString("\n")
	if len(rep.Cases) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "phase\tconc\tops/s\t±sd\tp50\tp90\tp99\tp99.9\tmax\thits\tmisses\tsets\terrors\t")
		for _, c := range rep.Cases {
			sm := c.Summary
			sd := "-"
			if sm.OpsPerSec.N > 1 {
				sd = fmt.Sprintf("%s (%.1f%%)", formatCount(sm.OpsPerSec.SD), 100*sm.OpsPerSec.CV())
			}
			l := sm.Latency
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t\n",
				c.Phase, c.Concurrency, formatCount(sm.OpsPerSec.Mean), sd,
				formatUs(l.P50Us), formatUs(l.P90Us), formatUs(l.P99Us), formatUs(l.P999Us), formatUs(l.MaxUs),
				sm.Counts.Hits, sm.Counts.Misses, sm.Counts.Sets, sm.Counts.Errors)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	t := rep.Totals
	if rep.Preload != nil {
		t.add(&Counts{ErrorsByKind: rep.Preload.ErrorsByKind, ErrorSamples: rep.Preload.ErrorSamples})
	}
	if len(t.ErrorsByKind) == 0 && rep.ProbeErrors == 0 {
		b.WriteString("errors: none\n")
	} else {
		fmt.Fprintf(&b, "errors: %d in the cases", rep.Totals.Errors)
		if rep.Preload != nil && rep.Preload.Errors > 0 {
			fmt.Fprintf(&b, ", %d in the preload", rep.Preload.Errors)
		}
		if rep.ProbeErrors > 0 {
			fmt.Fprintf(&b, ", %d servers unreachable", rep.ProbeErrors)
		}
		b.WriteString("\n")
		for _, k := range sortedKeys(t.ErrorsByKind) {
			fmt.Fprintf(&b, "  %-16s %10d  %s\n", k, t.ErrorsByKind[k], t.ErrorSamples[k])
		}
	}
	if t.Hits+t.Misses > 0 {
		fmt.Fprintf(&b, "gets: %d hits, %d misses (%.2f%% of answered gets; %d intended, %d of keys that were written)\n",
			t.Hits, t.Misses, 100*t.MissRatio(), t.ExpectedMisses, t.UnexpectedMisses)
	}
	if s.Verify || rep.Workload.Mode == ModeImport {
		fmt.Fprintf(&b, "verify: %d values checked, %d wrong, %d missing\n", t.Verified, t.Wrong, t.UnexpectedMisses)
	}
	for _, c := range rep.Cases {
		for _, r := range c.Runs {
			if !r.Complete {
				fmt.Fprintf(&b, "incomplete: %s c=%d run %d attempted %d of %d records before --duration or --max-ops ran out\n",
					c.Phase, c.Concurrency, r.Repeat, r.Ops, r.Records)
			}
		}
	}
	if s.Failover {
		for _, c := range rep.Cases {
			for _, r := range c.Runs {
				if r.SetTries == 0 {
					continue // no writes (import read): no failover to measure
				}
				writeFailover(&b, c, r)
			}
		}
	}
	if s.Timeline {
		for _, c := range rep.Cases {
			for _, r := range c.Runs {
				writeTimeline(&b, c, r)
			}
		}
	}
	for _, p := range rep.ServersAfter {
		if p.OK {
			fmt.Fprintf(&b, "server %s after the run: %s\n", p.Addr, describeInfo(p.Info))
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func writeFailover(b *strings.Builder, c CaseResult, r RunResult) {
	fmt.Fprintf(b, "failover %s c=%d run %d: ", c.Phase, c.Concurrency, r.Repeat)
	f := r.Failover
	if f == nil {
		b.WriteString("no acknowledged-write gap\n")
		return
	}
	if f.AtLeast && f.LongestGapMs == 0 {
		b.WriteString("not determined: no window among the longest write gaps each client kept\n")
		return
	}
	atLeast := ""
	if f.AtLeast {
		// Some client let go of a gap longer than this window.
		atLeast = "at least "
	}
	fmt.Fprintf(b, "longest window without an acknowledged write %s%s, from t=%.3fs", atLeast, formatUs(f.LongestGapMs*1000), f.GapStartS)
	switch {
	case !f.Recovered:
		b.WriteString(", not recovered before the end of the run")
	case f.FirstErrorS >= 0:
		fmt.Fprintf(b, "; first failed write at t=%.3fs, first success %s after it", f.FirstErrorS, formatUs(f.RecoveryMs*1000))
	default:
		b.WriteString("; no write failed in it (writes stalled)")
	}
	b.WriteString("\n")
}

func writeTimeline(b *strings.Builder, c CaseResult, r RunResult) {
	fmt.Fprintf(b, "timeline %s c=%d run %d (second: ops/errors/writes):", c.Phase, c.Concurrency, r.Repeat)
	for i, p := range r.Timeline {
		if i%6 == 0 {
			b.WriteString("\n ")
		}
		fmt.Fprintf(b, " %3d: %d/%d/%d", p.Second, p.Ops, p.Errors, p.Writes)
	}
	b.WriteString("\n")
}

func describeInfo(info map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(info) {
		parts = append(parts, k+"="+info[k])
	}
	return strings.Join(parts, " ")
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// formatCount renders a count or rate with thousands separators.
func formatCount(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	neg := x < 0
	s := strconv.FormatInt(int64(math.Round(math.Abs(x))), 10)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatUs renders microseconds with three significant digits and a unit.
func formatUs(v float64) string {
	switch {
	case v <= 0:
		return "-"
	case v < 1000:
		return sig3(v) + "µs"
	case v < 1e6:
		return sig3(v/1e3) + "ms"
	}
	return sig3(v/1e6) + "s"
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
