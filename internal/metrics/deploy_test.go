package metrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

const deployDir = "../../deploy/prometheus"

// promConfig is the part of prometheus.yml the test checks.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		ScrapeTimeout      string `yaml:"scrape_timeout"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		Scheme        string `yaml:"scheme"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
		RelabelConfigs []map[string]any `yaml:"relabel_configs"`
	} `yaml:"scrape_configs"`
}

// ruleFile is Prometheus's rule file schema; unknown keys are errors.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(v), path)
}

// exprs collects every PromQL expression the deploy files use, by source.
func exprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}

	var cfg promConfig
	decodeYAML(t, filepath.Join(deployDir, "prometheus.yml"), &cfg)
	require.Len(t, cfg.ScrapeConfigs, 1)
	sc := cfg.ScrapeConfigs[0]
	require.Equal(t, "kvd", sc.JobName)
	require.Equal(t, "/metrics", sc.MetricsPath)
	require.Len(t, sc.StaticConfigs, 1)
	require.Len(t, sc.StaticConfigs[0].Targets, 3, "a 3-node cluster")
	for _, d := range []string{cfg.Global.ScrapeInterval, cfg.Global.ScrapeTimeout, cfg.Global.EvaluationInterval} {
		_, err := time.ParseDuration(d)
		require.NoError(t, err)
	}
	require.NotEmpty(t, cfg.RuleFiles)

	alerts := map[string]bool{}
	for _, rf := range cfg.RuleFiles {
		var rules ruleFile
		decodeYAML(t, filepath.Join(deployDir, rf), &rules)
		for _, g := range rules.Groups {
			require.NotEmpty(t, g.Name)
			for _, r := range g.Rules {
				require.NotEmpty(t, r.Alert, "group %s: every rule here is an alert", g.Name)
				require.False(t, alerts[r.Alert], "alert %s defined twice", r.Alert)
				alerts[r.Alert] = true
				require.NotEmpty(t, strings.TrimSpace(r.Expr), r.Alert)
				if r.For != "" {
					_, err := time.ParseDuration(r.For)
					require.NoError(t, err, r.Alert)
				}
				require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], r.Alert)
				require.NotEmpty(t, r.Annotations["summary"], r.Alert)
				out[rf+": "+r.Alert] = r.Expr
			}
		}
	}
	for _, a := range []string{"KvdClusterNoLeader", "KvdFrequentLeaderChanges", "KvdRaftLogFsyncSlow", "KvdMemberDown"} {
		require.True(t, alerts[a], "the alert %s is required", a)
	}

	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana-dashboard.json"))
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.UID)
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		require.False(t, ids[p.ID], "panel id %d used twice", p.ID)
		ids[p.ID] = true
		if p.Type != "row" {
			require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q target %d", p.Title, i)
			out["dashboard: "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			out["dashboard variable: "+v.Definition] = v.Definition
		}
	}
	return out
}

var (
	metricName = regexp.MustCompile(`\b(?:kvd|go|process)_[a-zA-Z0-9_]+\b`)
	// selector matches name{matchers}; matcher labels are checked too.
	selector = regexp.MustCompile(`\b((?:kvd|go|process)_[a-zA-Z0-9_]+)\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// Labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance", "cluster", "member"}

// exposed maps every series name a live node exposes to its label names.
func exposed(fams map[string]*dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for name, f := range fams {
		var labels []string
		if len(f.GetMetric()) > 0 {
			for _, lp := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = append(slices.Clone(labels), "quantile"), labels, labels
		default:
			out[name] = labels
		}
	}
	return out
}

// TestDeployFilesUseExposedMetrics checks that the scrape config and rule
// files parse, that every metric (and every label matcher) the alert rules
// and the dashboard use is one a live node exposes after some traffic, and
// that each range function is given the metric type it assumes
// (checkRangeFunctions).
func TestDeployFilesUseExposedMetrics(t *testing.T) {
	all := exprs(t)
	n := startNode(t)
	// A first scrape, so the HTTP families have series in the second.
	_ = scrape(t, n)
	fams := scrape(t, n)
	names := exposed(fams)
	checkRangeFunctions(t, all, seriesCounters(fams))

	for src, expr := range all {
		used := metricName.FindAllString(expr, -1)
		if len(used) == 0 {
			// Prometheus's own per-target series, the one other name allowed.
			require.Regexp(t, `\bup\{`, expr, "%s: no kvd metric in %q", src, expr)
		}
		for _, m := range used {
			_, ok := names[m]
			require.True(t, ok, "%s uses %s, which a node does not expose", src, m)
		}
		for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
			for _, lm := range matcher.FindAllStringSubmatch(sel[2], -1) {
				label := lm[1]
				if slices.Contains(targetLabels, label) {
					continue
				}
				require.Contains(t, names[sel[1]], label, "%s: %s has no label %q", src, sel[1], label)
			}
		}
	}
}
