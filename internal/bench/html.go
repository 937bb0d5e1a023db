package bench

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// WriteHTML writes a self-contained page (inline SVG and CSS, no scripts,
// no external assets): throughput vs concurrency, latency percentiles vs
// concurrency, latency-by-percentile curves, per-second timelines when
// recorded, and the tables of the text report.
func WriteHTML(out io.Writer, rep *Report) error {
	var text strings.Builder
	if err := WriteText(&text, rep); err != nil {
		return err
	}
	data := struct {
		R      *Report
		Title  string
		Charts []template.HTML
		Rows   []htmlRow
		Text   string
	}{R: rep, Title: fmt.Sprintf("kvd bench · %s · %s", rep.Workload.Name, rep.Target), Text: text.String()}
	for _, c := range htmlCharts(rep) {
		data.Charts = append(data.Charts, template.HTML(c.svg())) //nolint:gosec // built by svg(), every label escaped
	}
	for _, c := range rep.Cases {
		sm := c.Summary
		data.Rows = append(data.Rows, htmlRow{
			Phase: c.Phase, Conc: c.Concurrency, Ops: formatCount(sm.OpsPerSec.Mean),
			SD:  map[bool]string{true: formatCount(sm.OpsPerSec.SD), false: "-"}[sm.OpsPerSec.N > 1],
			P50: formatUs(sm.Latency.P50Us), P90: formatUs(sm.Latency.P90Us), P99: formatUs(sm.Latency.P99Us),
			P999: formatUs(sm.Latency.P999Us), Max: formatUs(sm.Latency.MaxUs),
			Hits: sm.Counts.Hits, Misses: sm.Counts.Misses, Sets: sm.Counts.Sets, Errors: sm.Counts.Errors,
		})
	}
	return htmlPage.Execute(out, data)
}

type htmlRow struct {
	Phase                        string
	Conc                         int
	Ops, SD, P50, P90, P99, P999 string
	Max                          string
	Hits, Misses, Sets, Errors   int64
}

func htmlCharts(rep *Report) []chart {
	if len(rep.Cases) == 0 {
		return nil
	}
	// Concurrency levels in run order, evenly spaced on the x axis.
	var levels []int
	pos := map[int]float64{}
	for _, c := range rep.Cases {
		if _, ok := pos[c.Concurrency]; !ok {
			pos[c.Concurrency] = float64(len(levels))
			levels = append(levels, c.Concurrency)
		}
	}
	var xt []tick
	for _, l := range levels {
		xt = append(xt, tick{pos[l], strconv.Itoa(l)})
	}
	var phases []string
	seen := map[string]bool{}
	for _, c := range rep.Cases {
		if !seen[c.Phase] {
			seen[c.Phase] = true
			phases = append(phases, c.Phase)
		}
	}

	thr := chart{title: "Throughput vs concurrency (mean ± sd over repeats)", xLabel: "concurrent clients",
		yLabel: "operations per second", xTicks: xt}
	lat := chart{title: "Latency vs concurrency", xLabel: "concurrent clients", yLabel: "latency (log scale)", xTicks: xt, logY: true}
	for pi, ph := range phases {
		s := series{name: ph, color: palette[pi%len(palette)]}
		if len(phases) == 1 {
			s.name = "ops/s"
		}
		var p50, p90, p99, p999 series
		for _, c := range rep.Cases {
			if c.Phase != ph {
				continue
			}
			x := pos[c.Concurrency]
			sm := c.Summary
			s.xs, s.ys, s.errs = append(s.xs, x), append(s.ys, sm.OpsPerSec.Mean), append(s.errs, sm.OpsPerSec.SD)
			for _, p := range []struct {
				s *series
				v float64
			}{{&p50, sm.Latency.P50Us}, {&p90, sm.Latency.P90Us}, {&p99, sm.Latency.P99Us}, {&p999, sm.Latency.P999Us}} {
				p.s.xs, p.s.ys = append(p.s.xs, x), append(p.s.ys, p.v)
			}
		}
		thr.series = append(thr.series, s)
		prefix := ""
		if len(phases) > 1 {
			prefix = ph + " "
		}
		for i, p := range []*series{&p50, &p90, &p99, &p999} {
			p.name = prefix + []string{"p50", "p90", "p99", "p99.9"}[i]
			p.color = palette[(pi*4+i)%len(palette)]
			p.dashed = pi > 0
			lat.series = append(lat.series, *p)
		}
	}
	charts := []chart{thr, lat}

	// Latency by percentile, one curve per case (the HdrHistogram plot).
	dist := chart{title: "Latency by percentile", xLabel: "percentile", yLabel: "latency (log scale)", logY: true,
		xTicks: []tick{{0, "0%"}, {1, "90%"}, {2, "99%"}, {3, "99.9%"}, {4, "99.99%"}, {5, "99.999%"}}}
	for _, c := range rep.Cases {
		s := series{name: fmt.Sprintf("%s c=%d", c.Phase, c.Concurrency)}
		if len(phases) == 1 {
			s.name = fmt.Sprintf("c=%d", c.Concurrency)
		}
		for _, p := range c.Summary.Percentiles {
			if p.Percentile >= 100 || p.Percentile > 99.999 {
				continue
			}
			s.xs = append(s.xs, math.Log10(100/(100-p.Percentile)))
			s.ys = append(s.ys, p.Us)
		}
		dist.series = append(dist.series, s)
	}
	charts = append(charts, dist)

	// Timelines: ops/s and errors/s per second of the first repetition.
	for _, ph := range phases {
		tl := chart{title: "Timeline (" + ph + ", first repetition): successful operations and errors per second",
			xLabel: "seconds since the start of the case", yLabel: "per second"}
		maxSec := 0
		for i, c := range rep.Cases {
			if c.Phase != ph || len(c.Runs) == 0 || len(c.Runs[0].Timeline) == 0 {
				continue
			}
			ops := series{name: fmt.Sprintf("c=%d ops", c.Concurrency), color: palette[i%len(palette)]}
			errs := series{name: fmt.Sprintf("c=%d errors", c.Concurrency), color: palette[i%len(palette)], dashed: true}
			for _, p := range c.Runs[0].Timeline {
				if p.SpanS < 0.2 {
					continue // a sliver at the end: its rate would be noise
				}
				x := float64(p.Second) + p.SpanS/2
				ops.xs, ops.ys = append(ops.xs, x), append(ops.ys, float64(p.Ops-p.Errors)/p.SpanS)
				errs.xs, errs.ys = append(errs.xs, x), append(errs.ys, float64(p.Errors)/p.SpanS)
				maxSec = max(maxSec, p.Second+1)
			}
			tl.series = append(tl.series, ops, errs)
		}
		if len(tl.series) == 0 {
			continue
		}
		step := max(1, maxSec/10)
		for s := 0; s <= maxSec; s += step {
			tl.xTicks = append(tl.xTicks, tick{float64(s), strconv.Itoa(s)})
		}
		charts = append(charts, tl)
	}
	return charts
}

var htmlPage = template.Must(template.New("page").Funcs(template.FuncMap{
	"ts": func(t time.Time) string { return t.Format(time.RFC3339) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px;margin:0 0 4px}
.meta{color:#555;font-size:13px;margin-bottom:16px}
table{border-collapse:collapse;font-size:13px;margin:12px 0}
th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}
.charts svg{display:block;margin:16px 0;border:1px solid #eee}
pre{background:#f7f7f7;padding:10px;font-size:12px;white-space:pre-wrap}
</style></head><body>
<h1>{{.Title}}</h1>
<div class="meta">{{.R.Workload.Describe}}<br>
servers {{range $i, $s := .R.Servers}}{{if $i}}, {{end}}{{$s}}{{end}} · started {{ts .R.Started}} · {{.R.Tool}} {{.R.Version}} · run {{.R.RunID}}</div>
<table><tr><th>phase</th><th>clients</th><th>ops/s</th><th>±sd</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>hits</th><th>misses</th><th>sets</th><th>errors</th></tr>
{{range .Rows}}<tr><td>{{.Phase}}</td><td>{{.Conc}}</td><td>{{.Ops}}</td><td>{{.SD}}</td><td>{{.P50}}</td><td>{{.P90}}</td><td>{{.P99}}</td><td>{{.P999}}</td><td>{{.Max}}</td><td>{{.Hits}}</td><td>{{.Misses}}</td><td>{{.Sets}}</td><td>{{.Errors}}</td></tr>
{{end}}</table>
<div class="charts">{{range .Charts}}{{.}}
{{end}}</div>
<h2 style="font-size:16px">Full report</h2>
<pre>{{.Text}}</pre>
</body></html>
`))
