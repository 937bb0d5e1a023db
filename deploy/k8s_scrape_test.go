package deploy_test

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestKubernetesScrapeConfig: every alert rule and dashboard query selects
// its series by job (job="kvd") and the alerts group by cluster, so a
// Prometheus that scrapes the pods under another job (the usual
// annotation-based job is "kubernetes-pods") never fires an alert. The
// Kubernetes README must give a scrape config under that job, keeping
// kvd's pods on their HTTP port and labelling the cluster.
func TestKubernetesScrapeConfig(t *testing.T) {
	jobs := map[string]bool{}
	for _, f := range []string{"alerts.yml", "grafana-dashboard.json"} {
		for _, m := range regexp.MustCompile(`job\s*=\s*\\?"([^"\\]*)\\?"`).FindAllStringSubmatch(string(readFile(t, filepath.Join("prometheus", f))), -1) {
			jobs[m[1]] = true
		}
	}
	require.Len(t, jobs, 1, "the alerts and the dashboard select one job: %v", jobs)
	var job string
	for j := range jobs {
		job = j
	}

	readme := string(readFile(t, filepath.Join("kubernetes", "README.md")))
	var found bool
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		var cfg struct {
			ScrapeConfigs []struct {
				JobName             string `yaml:"job_name"`
				KubernetesSDConfigs []struct {
					Role string `yaml:"role"`
				} `yaml:"kubernetes_sd_configs"`
				RelabelConfigs []struct {
					SourceLabels []string `yaml:"source_labels"`
					Regex        string   `yaml:"regex"`
					Action       string   `yaml:"action"`
					TargetLabel  string   `yaml:"target_label"`
					Replacement  string   `yaml:"replacement"`
				} `yaml:"relabel_configs"`
			} `yaml:"scrape_configs"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(block[1]), &cfg), block[1])
		for _, sc := range cfg.ScrapeConfigs {
			found = true
			require.Equal(t, job, sc.JobName, "the alerts select job=%q", job)
			require.Len(t, sc.KubernetesSDConfigs, 1)
			require.Equal(t, "pod", sc.KubernetesSDConfigs[0].Role)
			var keepsPods, keepsHTTP, cluster bool
			for _, rc := range sc.RelabelConfigs {
				src := strings.Join(rc.SourceLabels, ";")
				switch {
				case rc.Action == "keep" && src == "__meta_kubernetes_pod_label_app_kubernetes_io_name":
					keepsPods = rc.Regex == "kvd"
				case rc.Action == "keep" && src == "__meta_kubernetes_pod_container_port_name":
					keepsHTTP = rc.Regex == "http"
				case rc.TargetLabel == "cluster":
					cluster = rc.Replacement != ""
				}
			}
			require.True(t, keepsPods, "keep only the pods labelled app.kubernetes.io/name=kvd")
			require.True(t, keepsHTTP, "keep only the container port named http (--http-addr, /metrics)")
			require.True(t, cluster, "set the cluster label the alerts group by")
		}
	}
	require.True(t, found, "kubernetes/README.md has no scrape config (```yaml block with scrape_configs)")

	// The names it relies on are the manifests' (the witness's pods are
	// scraped too: they serve /metrics like any member).
	for _, file := range []string{"kvd.yaml", "kvd-witness.yaml"} {
		manifest := string(readFile(t, filepath.Join("kubernetes", file)))
		require.True(t, slices.ContainsFunc(strings.Split(manifest, "\n"), func(l string) bool {
			return strings.TrimSpace(l) == "- name: http"
		}), "%s: the container has a port named http", file)
		require.Contains(t, manifest, "app.kubernetes.io/name: kvd", file)
	}
}
