// Package deploy_test checks the deployment files against the binary they
// deploy: every flag they pass must be one `kvd serve` accepts, every port a
// probe, a Service or a published port names must be the one kvd listens on,
// and every timeout that bounds a shutdown must exceed kvd's own (see
// stopBound). It
// reads the files only; deploy/compose/e2e_test.go (build tag e2e) runs them.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/kvd-project/kvd/internal/cli"
	"github.com/kvd-project/kvd/internal/config"
)

// serveCmd is the real `kvd serve` command, the authority on flag names.
func serveCmd(t *testing.T) *cobra.Command {
	t.Helper()
	root := cli.NewRoot(io.Discard, io.Discard)
	cmd, _, err := root.Find([]string{"serve"})
	if err != nil || cmd.Name() != "serve" {
		t.Fatalf("kvd serve command: %v", err)
	}
	return cmd
}

// serveArgs parses args the way `kvd serve` would and returns the value of
// every flag given (the last one wins, as in pflag). Only --flag=value is
// accepted: the split form hides which word is a value from readers.
func serveArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	cmd := serveCmd(t)
	out := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("%s: argument %q: want --flag=value", where, a)
			continue
		}
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("%s: --%s is not a flag of kvd serve", where, name)
			continue
		}
		out[name] = value
	}
	return out
}

// port returns the port of a host:port flag value.
func port(t *testing.T, where, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: %q: %v", where, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s: port of %q: %v", where, addr, err)
	}
	return n
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// --- Dockerfile ---

type dockerfile struct {
	entrypoint  []string
	healthcheck []string
	user        string
	volumes     []string
	expose      []int
	flags       map[string]string // ENTRYPOINT + CMD serve flags
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	var d dockerfile
	var cmd []string
	// Continuation lines are joined first so HEALTHCHECK reads as one.
	text := strings.ReplaceAll(string(readFile(t, "Dockerfile")), "\\\n", " ")
	execForm := func(s string) []string {
		var v []string
		if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &v); err != nil {
			t.Fatalf("Dockerfile: %q is not exec (JSON) form: %v", s, err)
		}
		return v
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "ENTRYPOINT":
			d.entrypoint = execForm(rest)
		case "CMD":
			cmd = execForm(rest)
		case "USER":
			d.user = strings.TrimSpace(rest)
		case "VOLUME":
			d.volumes = execForm(rest)
		case "EXPOSE":
			for _, f := range strings.Fields(rest) {
				n, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("Dockerfile: EXPOSE %q: %v", f, err)
				}
				d.expose = append(d.expose, n)
			}
		case "HEALTHCHECK":
			_, after, ok := strings.Cut(rest, " CMD ")
			if !ok {
				t.Fatalf("Dockerfile: HEALTHCHECK without CMD: %q", rest)
			}
			d.healthcheck = execForm(after)
		}
	}
	if len(d.entrypoint) < 2 || d.entrypoint[0] != "/kvd" || d.entrypoint[1] != "serve" {
		t.Fatalf("Dockerfile: ENTRYPOINT %q: want /kvd serve …", d.entrypoint)
	}
	d.flags = serveArgs(t, "Dockerfile ENTRYPOINT+CMD", append(append([]string{}, d.entrypoint[2:]...), cmd...))
	return d
}

func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	uid, _, _ := strings.Cut(d.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-root ID (scratch has no /etc/passwd)", d.user)
	}
	if len(d.volumes) != 1 || d.volumes[0] != d.flags["data-dir"] {
		t.Errorf("VOLUME %q, --data-dir %q: want the data dir to be the volume", d.volumes, d.flags["data-dir"])
	}
	want := map[int]bool{}
	for _, f := range []string{"memcache-addr", "http-addr", "peer-addr"} {
		addr := d.flags[f]
		if host, _, err := net.SplitHostPort(addr); err != nil || host != "0.0.0.0" {
			t.Errorf("--%s=%q: a container must listen on 0.0.0.0", f, addr)
			continue
		}
		want[port(t, f, addr)] = true
	}
	got := map[int]bool{}
	for _, p := range d.expose {
		got[p] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("EXPOSE %v, listeners %v: want the same ports", d.expose, want)
	}
	if len(d.healthcheck) < 2 || d.healthcheck[0] != "/kvd" || d.healthcheck[1] != "healthcheck" {
		t.Fatalf("HEALTHCHECK CMD %q: want /kvd healthcheck …", d.healthcheck)
	}
	hcURL := "http://127.0.0.1:11280/readyz"
	for _, a := range d.healthcheck[2:] {
		if v, ok := strings.CutPrefix(a, "--url="); ok {
			hcURL = v
		}
	}
	if want := fmt.Sprintf("http://127.0.0.1:%d/readyz", port(t, "http-addr", d.flags["http-addr"])); hcURL != want {
		t.Errorf("HEALTHCHECK probes %s, want %s", hcURL, want)
	}
}

// --- kubectl-free view of the Kubernetes manifests ---

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
}

type k8sService struct {
	ClusterIP                string            `yaml:"clusterIP"`
	PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
	Selector                 map[string]string `yaml:"selector"`
	Ports                    []struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort string `yaml:"targetPort"`
	} `yaml:"ports"`
}

type k8sPDB struct {
	MaxUnavailable *int `yaml:"maxUnavailable"`
	Selector       struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sStatefulSet struct {
	ServiceName         string `yaml:"serviceName"`
	Replicas            int    `yaml:"replicas"`
	PodManagementPolicy string `yaml:"podManagementPolicy"`
	Selector            struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
		Spec struct {
			TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
			SecurityContext               struct {
				RunAsUser int `yaml:"runAsUser"`
			} `yaml:"securityContext"`
			Containers []struct {
				Name    string   `yaml:"name"`
				Command []string `yaml:"command"`
				Args    []string `yaml:"args"`
				Env     []struct {
					Name      string `yaml:"name"`
					ValueFrom struct {
						FieldRef struct {
							FieldPath string `yaml:"fieldPath"`
						} `yaml:"fieldRef"`
					} `yaml:"valueFrom"`
				} `yaml:"env"`
				Ports []struct {
					Name          string `yaml:"name"`
					ContainerPort int    `yaml:"containerPort"`
				} `yaml:"ports"`
				StartupProbe   *k8sProbe `yaml:"startupProbe"`
				ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
				LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
				VolumeMounts   []struct {
					Name      string `yaml:"name"`
					MountPath string `yaml:"mountPath"`
				} `yaml:"volumeMounts"`
			} `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
	VolumeClaimTemplates []struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
	} `yaml:"volumeClaimTemplates"`
}

func TestKubernetesManifests(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, filepath.Join("kubernetes", "kvd.yaml"))))
	services := map[string]k8sService{}
	var pdbs []k8sPDB
	var sets []k8sStatefulSet
	var setNames []string
	for {
		var obj k8sObject
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("kubernetes/kvd.yaml: %v", err)
		}
		if obj.Kind == "" {
			continue // an empty document (comments only)
		}
		if obj.APIVersion == "" || obj.Metadata.Name == "" {
			t.Errorf("%s without apiVersion or metadata.name", obj.Kind)
		}
		decodeSpec := func(v any) {
			if err := obj.Spec.Decode(v); err != nil {
				t.Fatalf("%s %s: %v", obj.Kind, obj.Metadata.Name, err)
			}
		}
		switch obj.Kind {
		case "Service":
			var s k8sService
			decodeSpec(&s)
			services[obj.Metadata.Name] = s
		case "PodDisruptionBudget":
			var p k8sPDB
			decodeSpec(&p)
			pdbs = append(pdbs, p)
		case "StatefulSet":
			var s k8sStatefulSet
			decodeSpec(&s)
			sets = append(sets, s)
			setNames = append(setNames, obj.Metadata.Name)
		default:
			t.Errorf("unexpected kind %s", obj.Kind)
		}
	}
	if len(sets) != 1 || len(pdbs) != 1 {
		t.Fatalf("want one StatefulSet and one PodDisruptionBudget, got %d and %d", len(sets), len(pdbs))
	}
	sts, stsName := sets[0], setNames[0]
	podLabels := sts.Template.Metadata.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if podLabels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}

	if sts.Replicas != 3 {
		t.Errorf("replicas %d, want 3", sts.Replicas)
	}
	if sts.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy %q: want Parallel (a member is ready only once a quorum exists)", sts.PodManagementPolicy)
	}
	if !matches(sts.Selector.MatchLabels) {
		t.Errorf("StatefulSet selector %v does not match the pod labels %v", sts.Selector.MatchLabels, podLabels)
	}
	if p := pdbs[0]; p.MaxUnavailable == nil || *p.MaxUnavailable != 1 || !matches(p.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget: want maxUnavailable 1 selecting the pods, got %+v", p)
	}

	if len(sts.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(sts.Template.Spec.Containers))
	}
	c := sts.Template.Spec.Containers[0]
	if len(c.Command) != 2 || c.Command[0] != "/kvd" || c.Command[1] != "serve" {
		t.Errorf("command %q: want [/kvd serve]", c.Command)
	}
	flags := serveArgs(t, "StatefulSet args", c.Args)
	for _, f := range []string{"name", "data-dir", "memcache-addr", "http-addr", "peer-addr", "initial-cluster"} {
		if flags[f] == "" {
			t.Fatalf("StatefulSet args: --%s missing", f)
		}
	}

	// $(VAR) in args is expanded by the kubelet only when VAR is in env.
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	for _, a := range c.Args {
		for _, m := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
			if _, ok := env[m[1]]; !ok {
				t.Errorf("argument %q uses $(%s), which env does not define", a, m[1])
			}
		}
	}
	if flags["name"] != "$(POD_NAME)" || env["POD_NAME"] != "metadata.name" {
		t.Errorf("--name=%q (POD_NAME from %q): want the pod name, which initial-cluster lists", flags["name"], env["POD_NAME"])
	}
	if env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE comes from %q, want metadata.namespace", env["POD_NAMESPACE"])
	}

	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, flag := range map[string]string{"memcache": "memcache-addr", "http": "http-addr", "peer": "peer-addr"} {
		if got, want := ports[name], port(t, flag, flags[flag]); got != want {
			t.Errorf("containerPort %s = %d, but --%s listens on %d", name, got, flag, want)
		}
	}
	resolve := func(p string) int {
		if n, err := strconv.Atoi(p); err == nil {
			return n
		}
		return ports[p]
	}
	httpPort := port(t, "http-addr", flags["http-addr"])
	for _, pr := range []struct {
		name  string
		probe *k8sProbe
		path  string
	}{
		{"readinessProbe", c.ReadinessProbe, "/readyz"},
		{"livenessProbe", c.LivenessProbe, "/healthz"},
		{"startupProbe", c.StartupProbe, "/healthz"},
	} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s: missing or not httpGet", pr.name)
			continue
		}
		if g := pr.probe.HTTPGet; g.Path != pr.path || resolve(g.Port) != httpPort {
			t.Errorf("%s: GET %s on port %q (%d), want %s on --http-addr's port %d", pr.name, g.Path, g.Port, resolve(g.Port), pr.path, httpPort)
		}
	}
	ann := sts.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(httpPort) {
		t.Errorf("prometheus annotations %v: want scrape true, path /metrics, port %d", ann, httpPort)
	}

	// Peers: the headless Service names every pod, and --initial-cluster
	// must list exactly those names on the peer port.
	peerSvc, ok := services[sts.ServiceName]
	if !ok {
		t.Fatalf("serviceName %q: no such Service", sts.ServiceName)
	}
	if peerSvc.ClusterIP != "None" || !peerSvc.PublishNotReadyAddresses || !matches(peerSvc.Selector) {
		t.Errorf("Service %s: want headless (clusterIP None), publishNotReadyAddresses, selecting the pods; got %+v", sts.ServiceName, peerSvc)
	}
	peerPort := port(t, "peer-addr", flags["peer-addr"])
	var want []string
	for i := 0; i < sts.Replicas; i++ {
		pod := fmt.Sprintf("%s-%d", stsName, i)
		want = append(want, fmt.Sprintf("%s=%s.%s.$(POD_NAMESPACE).svc.cluster.local:%d", pod, pod, sts.ServiceName, peerPort))
	}
	if got := flags["initial-cluster"]; got != strings.Join(want, ",") {
		t.Errorf("--initial-cluster=%s\nwant           %s", got, strings.Join(want, ","))
	}
	// A member dials another's HTTP API at the address that one advertises:
	// a follower forwards membership changes (kvd cluster add, remove,
	// transfer-leader) to the leader there, and kvd cluster status asks the
	// leader there. With a wildcard --http-addr the default is the host
	// name, the bare pod name, which no other pod resolves; the pod's name
	// under the headless Service does resolve.
	podDNS := fmt.Sprintf("$(POD_NAME).%s.$(POD_NAMESPACE).svc.cluster.local", sts.ServiceName)
	for flag, listen := range map[string]string{"advertise-http-addr": "http-addr", "advertise-memcache-addr": "memcache-addr"} {
		if want := fmt.Sprintf("%s:%d", podDNS, port(t, listen, flags[listen])); flags[flag] != want {
			t.Errorf("--%s=%q, want %s: the default, the pod's host name, does not resolve in other pods", flag, flags[flag], want)
		}
	}
	// And kvd accepts the values once the kubelet has expanded them: each
	// parses as its flag, and the membership validates.
	cfg := config.Default()
	fs := serveCmd(t).Flags()
	for name, v := range flags {
		v = strings.NewReplacer("$(POD_NAME)", stsName+"-0", "$(POD_NAMESPACE)", "default").Replace(v)
		if err := fs.Set(name, v); err != nil {
			t.Errorf("--%s=%s: %v", name, v, err)
		}
	}
	cfg.Name = stsName + "-0"
	cfg.InitialCluster = strings.ReplaceAll(flags["initial-cluster"], "$(POD_NAMESPACE)", "default")
	cfg.PeerAddr = flags["peer-addr"]
	expand := strings.NewReplacer("$(POD_NAME)", stsName+"-0", "$(POD_NAMESPACE)", "default").Replace
	cfg.AdvertiseHTTPAddr, cfg.AdvertiseMemcacheAddr = expand(flags["advertise-http-addr"]), expand(flags["advertise-memcache-addr"])
	if err := cfg.Validate(); err != nil {
		t.Errorf("kvd rejects the expanded configuration: %v", err)
	}

	clientSvc, ok := services["kvd"]
	if !ok || !matches(clientSvc.Selector) || clientSvc.ClusterIP == "None" {
		t.Errorf("client Service kvd: want a ClusterIP Service selecting the pods, got %+v", clientSvc)
	}
	for name, s := range services {
		for _, p := range s.Ports {
			if resolve(p.TargetPort) == 0 {
				t.Errorf("Service %s port %s: targetPort %q names no container port", name, p.Name, p.TargetPort)
			}
		}
	}

	if len(sts.VolumeClaimTemplates) != 1 || len(c.VolumeMounts) != 1 ||
		sts.VolumeClaimTemplates[0].Metadata.Name != c.VolumeMounts[0].Name ||
		c.VolumeMounts[0].MountPath != flags["data-dir"] {
		t.Errorf("the PVC template must be mounted at --data-dir=%s", flags["data-dir"])
	}
	shutdown := shutdownTimeout(t, flags)
	if grace := time.Duration(sts.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace <= stopBound(shutdown) {
		t.Errorf("terminationGracePeriodSeconds %s must exceed twice --shutdown-timeout %s (the drain, then closing the stores)", grace, shutdown)
	}
	d := parseDockerfile(t)
	if uid, _, _ := strings.Cut(d.user, ":"); strconv.Itoa(sts.Template.Spec.SecurityContext.RunAsUser) != uid {
		t.Errorf("runAsUser %d, but the image's USER is %s (the owner of /data)", sts.Template.Spec.SecurityContext.RunAsUser, d.user)
	}
}

// stopBound is how long kvd may take to stop after SIGTERM: the drain is
// bounded by --shutdown-timeout, and stopping raft and closing the stores
// after it by --shutdown-timeout again (node.Shutdown). A grace period
// shorter than both SIGKILLs a node that is still closing its stores.
func stopBound(shutdown time.Duration) time.Duration { return 2 * shutdown }

// shutdownTimeout is --shutdown-timeout from flags, or kvd's default.
func shutdownTimeout(t *testing.T, flags map[string]string) time.Duration {
	t.Helper()
	v, ok := flags["shutdown-timeout"]
	if !ok {
		return config.Default().ShutdownTimeout
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("--shutdown-timeout=%s: %v", v, err)
	}
	return d
}

// --- systemd ---

func TestSystemdUnitAndConfig(t *testing.T) {
	cfg := config.Default()
	if err := cfg.LoadFile(filepath.Join("systemd", "kvd.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("systemd/kvd.yaml: kvd rejects it: %v", err)
	}

	unit := map[string][]string{}
	for _, line := range strings.Split(string(readFile(t, filepath.Join("systemd", "kvd.service"))), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("kvd.service: %q is not key=value", line)
			continue
		}
		unit[k] = append(unit[k], v)
	}
	one := func(k string) string {
		if len(unit[k]) != 1 {
			t.Errorf("kvd.service: want one %s=, got %q", k, unit[k])
			return ""
		}
		return unit[k][0]
	}

	execStart := strings.Fields(one("ExecStart"))
	if len(execStart) < 2 || execStart[1] != "serve" {
		t.Fatalf("ExecStart=%q: want <kvd> serve …", execStart)
	}
	flags := serveArgs(t, "kvd.service ExecStart", execStart[2:])
	if want := "/etc/" + one("ConfigurationDirectory") + "/kvd.yaml"; flags["config"] != want {
		t.Errorf("ExecStart --config=%q, want %s (ConfigurationDirectory)", flags["config"], want)
	}
	if want := "/var/lib/" + one("StateDirectory"); cfg.DataDir != want {
		t.Errorf("kvd.yaml data-dir %q, want %s (StateDirectory)", cfg.DataDir, want)
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	if stop <= stopBound(cfg.ShutdownTimeout) {
		t.Errorf("TimeoutStopSec %s must exceed twice kvd.yaml's shutdown-timeout %s, or systemd kills a node still closing its stores", stop, cfg.ShutdownTimeout)
	}
	if nofile, err := strconv.Atoi(one("LimitNOFILE")); err != nil || nofile < 2*cfg.MaxConnections {
		t.Errorf("LimitNOFILE %q: want at least twice max-connections (%d)", unit["LimitNOFILE"], cfg.MaxConnections)
	}
	for k, want := range map[string]string{
		"Restart": "on-failure", "RestartPreventExitStatus": strconv.Itoa(cli.ExitRemoved),
		"ProtectSystem": "strict", "NoNewPrivileges": "yes",
		"DynamicUser": "yes", "ProtectHome": "yes", "PrivateTmp": "yes",
	} {
		if got := one(k); got != want {
			t.Errorf("kvd.service: %s=%s, want %s", k, got, want)
		}
	}

	// systemd's own parser, where installed. The binary is not installed
	// here, which is the one complaint expected.
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze not installed: skipping systemd's own check")
		return
	}
	out, _ := exec.Command("systemd-analyze", "verify", filepath.Join("systemd", "kvd.service")).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.Contains(line, "is not executable") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}

// --- docker-compose ---

// envDefault expands ${VAR:-default} to its default, as compose does when
// VAR is unset.
var envDefault = regexp.MustCompile(`\$\{[A-Z0-9_]+:-([^}]*)\}`)

type composeFile struct {
	Services map[string]struct {
		Image           string   `yaml:"image"`
		Hostname        string   `yaml:"hostname"`
		Restart         string   `yaml:"restart"`
		StopGracePeriod string   `yaml:"stop_grace_period"`
		Command         []string `yaml:"command"`
		Volumes         []string `yaml:"volumes"`
		Ports           []string `yaml:"ports"`
		Networks        map[string]struct {
			Aliases []string `yaml:"aliases"`
		} `yaml:"networks"`
	} `yaml:"services"`
	Networks map[string]struct {
		Internal bool `yaml:"internal"`
	} `yaml:"networks"`
	Volumes map[string]any `yaml:"volumes"`
}

func TestComposeFiles(t *testing.T) {
	image := parseDockerfile(t)
	for file, size := range map[string]int{"docker-compose.yml": 3, "docker-compose.2node.yml": 2} {
		t.Run(file, func(t *testing.T) {
			raw := envDefault.ReplaceAll(readFile(t, filepath.Join("compose", file)), []byte("$1"))
			var cf composeFile
			if err := yaml.Unmarshal(raw, &cf); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(cf.Services) != size {
				t.Fatalf("%d services, want %d", len(cf.Services), size)
			}
			if !cf.Networks["peer"].Internal {
				t.Errorf("network peer must be internal: raft traffic only")
			}
			var wantCluster []string
			for i := 1; i <= size; i++ {
				wantCluster = append(wantCluster, fmt.Sprintf("kvd%d=kvd%d-peer:%d", i, i, port(t, "peer-addr", image.flags["peer-addr"])))
			}
			hostPorts := map[string]bool{}
			volumes := map[string]bool{}
			for i := 1; i <= size; i++ {
				name := fmt.Sprintf("kvd%d", i)
				s, ok := cf.Services[name]
				if !ok {
					t.Fatalf("service %s missing", name)
				}
				// The image's entrypoint flags come first; command's win.
				flags := serveArgs(t, name+" command", s.Command)
				if flags["name"] != name || flags["initial-cluster"] != strings.Join(wantCluster, ",") {
					t.Errorf("%s: --name=%s --initial-cluster=%s, want %s and %s", name, flags["name"], flags["initial-cluster"], name, strings.Join(wantCluster, ","))
				}
				all := map[string]string{}
				for k, v := range image.flags {
					all[k] = v
				}
				for k, v := range flags {
					all[k] = v
				}
				// Each value parses as its flag; the membership validates.
				cfg := config.Default()
				fs := serveCmd(t).Flags()
				for k, v := range all {
					if err := fs.Set(k, v); err != nil {
						t.Errorf("%s: --%s=%s: %v", name, k, v, err)
					}
				}
				cfg.Name, cfg.InitialCluster, cfg.PeerAddr = all["name"], all["initial-cluster"], all["peer-addr"]
				if err := cfg.Validate(); err != nil {
					t.Errorf("%s: kvd rejects its flags: %v", name, err)
				}
				// The advertised HTTP address defaults to the host name
				// (the listeners are wildcards): the others reach it
				// because it is also the service's name.
				if s.Hostname != name {
					t.Errorf("%s: hostname %q, want %s, a name the other containers resolve", name, s.Hostname, name)
				}
				if aliases := s.Networks["peer"].Aliases; len(aliases) != 1 || aliases[0] != name+"-peer" {
					t.Errorf("%s: peer network aliases %q, want [%s-peer]", name, aliases, name)
				}
				if _, ok := s.Networks["client"]; !ok {
					t.Errorf("%s: not on the client network, where its ports are published", name)
				}
				if len(s.Volumes) != 1 {
					t.Fatalf("%s: volumes %q, want one", name, s.Volumes)
				}
				vol, mount, _ := strings.Cut(s.Volumes[0], ":")
				if _, declared := cf.Volumes[vol]; !declared || mount != image.flags["data-dir"] || volumes[vol] {
					t.Errorf("%s: volume %q: want its own named volume at %s", name, s.Volumes[0], image.flags["data-dir"])
				}
				volumes[vol] = true
				published := map[int]bool{}
				for _, p := range s.Ports {
					parts := strings.Split(p, ":")
					if len(parts) != 3 || parts[0] != "127.0.0.1" {
						t.Errorf("%s: port %q: want 127.0.0.1:host:container by default", name, p)
						continue
					}
					if hostPorts[parts[1]] {
						t.Errorf("%s: host port %s published twice", name, parts[1])
					}
					hostPorts[parts[1]] = true
					n, _ := strconv.Atoi(parts[2])
					published[n] = true
				}
				for _, f := range []string{"memcache-addr", "http-addr"} {
					if !published[port(t, f, all[f])] {
						t.Errorf("%s: --%s=%s is not published", name, f, all[f])
					}
				}
				grace, err := time.ParseDuration(s.StopGracePeriod)
				if err != nil || grace <= stopBound(shutdownTimeout(t, all)) {
					t.Errorf("%s: stop_grace_period %q must exceed twice --shutdown-timeout (%s): the drain, then closing the stores",
						name, s.StopGracePeriod, shutdownTimeout(t, all))
				}
				if s.Restart == "" || s.Restart == "no" {
					t.Errorf("%s: restart %q: want a restart policy", name, s.Restart)
				}
			}
		})
	}
}

// --- kvd healthcheck ---

func TestHealthcheckCommand(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case ready:
			fmt.Fprint(w, `{"ready":true}`)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"ready":false,"reason":"no leader"}`)
		}
	}))
	defer srv.Close()
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := cli.NewRoot(&out, io.Discard)
		root.SetArgs(append([]string{"healthcheck"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	exitCode := func(err error) int {
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return -1
	}

	if out, err := run("--url", srv.URL+"/readyz"); err != nil || !strings.Contains(out, "ready") {
		t.Errorf("ready: %q, %v; want success", out, err)
	}
	ready = false
	if _, err := run("--url", srv.URL+"/readyz"); err == nil || !strings.Contains(err.Error(), "no leader") || exitCode(err) != 1 {
		t.Errorf("not ready: %v (exit %d); want exit 1 naming the reason", err, exitCode(err))
	}
	start := time.Now()
	if _, err := run("--url", srv.URL+"/slow", "--timeout", "200ms"); err == nil || exitCode(err) != 1 || time.Since(start) > time.Second {
		t.Errorf("slow: %v after %s; want exit 1 within the timeout", err, time.Since(start))
	}
	if _, err := run("--url", "http://127.0.0.1:1/readyz", "--timeout", "1s"); err == nil || exitCode(err) != 1 {
		t.Errorf("refused: %v; want exit 1", err)
	}
}
