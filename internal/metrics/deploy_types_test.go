package metrics_test

import (
	"regexp"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// seriesCounters maps every series name a node exposes to whether it only
// goes up while the process runs (a counter, or a histogram's or summary's
// _bucket, _sum and _count), as rate() and increase() assume.
func seriesCounters(fams map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for name, f := range fams {
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			out[name] = true
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = false, true, true
		default:
			out[name] = false
		}
	}
	return out
}

// rangeCall matches a range function applied directly to a selector.
var rangeCall = regexp.MustCompile(`\b(rate|irate|increase|resets|deriv|delta|idelta|predict_linear)\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// checkRangeFunctions: rate(), irate() and increase() take a drop as a
// counter reset and add the whole new value, so over a gauge (an applied
// index, which falls back to the durable index while a node restarted
// after a crash replays its log) they chart a spike; deriv() and delta()
// are the gauge functions, and over a counter they see a reset as a fall.
// counters is seriesCounters of a live node's scrape.
func checkRangeFunctions(t *testing.T, exprs map[string]string, counters map[string]bool) {
	t.Helper()
	for src, expr := range exprs {
		for _, m := range rangeCall.FindAllStringSubmatch(expr, -1) {
			fn, name := m[1], m[2]
			isCounter, ok := counters[name]
			if !ok {
				continue // TestDeployFilesUseExposedMetrics reports it
			}
			switch fn {
			case "rate", "irate", "increase", "resets":
				require.True(t, isCounter, "%s: %s(%s): %s is a gauge (use deriv or delta)", src, fn, name, name)
			default:
				require.False(t, isCounter, "%s: %s(%s): %s is a counter (use rate or increase)", src, fn, name, name)
			}
		}
	}
}
