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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
		Path   string `yaml:"path"`
		Port   string `yaml:"port"`
		Scheme string `yaml:"scheme"`
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
			Volumes []struct {
				Name   string `yaml:"name"`
				Secret *struct {
					SecretName string `yaml:"secretName"`
				} `yaml:"secret"`
			} `yaml:"volumes"`
			Containers []struct {
				Name    string   `yaml:"name"`
				Command []string `yaml:"command"`
				Args    []string `yaml:"args"`
				EnvFrom []struct {
					ConfigMapRef *struct {
						Name string `yaml:"name"`
					} `yaml:"configMapRef"`
				} `yaml:"envFrom"`
				Env []struct {
					Name      string `yaml:"name"`
					Value     string `yaml:"value"`
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
					ReadOnly  bool   `yaml:"readOnly"`
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

// k8sMember is what a manifest's StatefulSet is meant to found: replicas
// pods named after it, witnesses or data members.
type k8sMember struct {
	set      string
	replicas int
	witness  bool
}

func TestKubernetesManifests(t *testing.T) {
	for _, m := range []struct {
		file string
		sets []k8sMember // in the order of the manifest, and of --initial-cluster
		// secure: TLS, mutual TLS and an auth file, from Secrets
		// (checkSecurePod).
		secure bool
	}{
		{"kvd.yaml", []k8sMember{{"kvd", 3, false}}, false},
		// Two data members and a witness: the witness in a StatefulSet of
		// its own, so that it has its own pod template and resources.
		{"kvd-witness.yaml", []k8sMember{{"kvd", 2, false}, {"kvd-witness", 1, true}}, false},
		{"kvd-secure.yaml", []k8sMember{{"kvd", 3, false}}, true},
	} {
		t.Run(m.file, func(t *testing.T) { checkManifest(t, m.file, m.sets, m.secure) })
	}
}

// checkManifest checks one manifest: its StatefulSets against want, each
// one's pod template against kvd serve, and the Services and the
// PodDisruptionBudget against the pods they must select.
func checkManifest(t *testing.T, file string, want []k8sMember, secure bool) {
	where := filepath.Join("kubernetes", file)
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, where)))
	services := map[string]k8sService{}
	var serviceNames []string
	var pdbs []k8sPDB
	var sets []k8sStatefulSet
	var setNames []string
	configMaps := map[string]map[string]string{}
	for {
		var raw yaml.Node
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		var obj k8sObject
		if err == nil {
			err = raw.Decode(&obj)
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
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
			serviceNames = append(serviceNames, obj.Metadata.Name)
		case "PodDisruptionBudget":
			var p k8sPDB
			decodeSpec(&p)
			pdbs = append(pdbs, p)
		case "StatefulSet":
			var s k8sStatefulSet
			decodeSpec(&s)
			sets = append(sets, s)
			setNames = append(setNames, obj.Metadata.Name)
		case "ConfigMap":
			// Its data is beside spec, which a ConfigMap does not have.
			var cm struct {
				Data map[string]string `yaml:"data"`
			}
			if err := raw.Decode(&cm); err != nil {
				t.Fatalf("ConfigMap %s: %v", obj.Metadata.Name, err)
			}
			configMaps[obj.Metadata.Name] = cm.Data
		default:
			t.Errorf("unexpected kind %s", obj.Kind)
		}
	}
	if len(sets) != len(want) || len(pdbs) != 1 {
		t.Fatalf("want %d StatefulSet(s) and one PodDisruptionBudget, got %d and %d", len(want), len(sets), len(pdbs))
	}
	matches := func(sel, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}

	// The founding members, in order: every pod of every StatefulSet.
	var cluster, witnesses []string
	peerPort := 0
	for i, w := range want {
		if setNames[i] != w.set || sets[i].Replicas != w.replicas {
			t.Fatalf("StatefulSet %d: %s with %d replicas, want %s with %d", i, setNames[i], sets[i].Replicas, w.set, w.replicas)
		}
		c := sets[i].Template.Spec.Containers
		if len(c) != 1 {
			t.Fatalf("%s: want one container, got %d", w.set, len(c))
		}
		p := port(t, "peer-addr", serveArgs(t, w.set+" args", c[0].Args)["peer-addr"])
		if peerPort != 0 && p != peerPort {
			t.Errorf("%s: --peer-addr port %d, but the other members' is %d", w.set, p, peerPort)
		}
		peerPort = p
		for n := 0; n < w.replicas; n++ {
			pod := fmt.Sprintf("%s-%d", w.set, n)
			cluster = append(cluster, fmt.Sprintf("%s=%s.%s.$(POD_NAMESPACE).svc.cluster.local:%d", pod, pod, sets[i].ServiceName, peerPort))
			if w.witness {
				witnesses = append(witnesses, pod)
			}
		}
	}

	for i, w := range want {
		checkStatefulSet(t, w, sets[i], services, configMaps, secure, strings.Join(cluster, ","), strings.Join(witnesses, ","))
	}

	// Disruptions count members, witnesses included: one at a time.
	if p := pdbs[0]; p.MaxUnavailable == nil || *p.MaxUnavailable != 1 {
		t.Errorf("PodDisruptionBudget: want maxUnavailable 1, got %+v", p)
	}
	for i, s := range sets {
		if !matches(pdbs[0].Selector.MatchLabels, s.Template.Metadata.Labels) {
			t.Errorf("PodDisruptionBudget selector %v misses the pods of %s (%v)", pdbs[0].Selector.MatchLabels, setNames[i], s.Template.Metadata.Labels)
		}
	}
	// Clients reach the data members, and never a witness, which refuses
	// every data request.
	clientSvc, ok := services["kvd"]
	if !ok || clientSvc.ClusterIP == "None" {
		t.Errorf("client Service kvd: want a ClusterIP Service, got %+v", clientSvc)
	}
	for i, w := range want {
		if sel := matches(clientSvc.Selector, sets[i].Template.Metadata.Labels); sel == w.witness {
			t.Errorf("client Service kvd (selector %v): selects the pods of %s: %v, want %v (witness: %v)",
				clientSvc.Selector, w.set, sel, !w.witness, w.witness)
		}
	}
	// A Service's target ports are names every pod it selects defines.
	for _, name := range serviceNames {
		s := services[name]
		for i, set := range sets {
			if !matches(s.Selector, set.Template.Metadata.Labels) {
				continue
			}
			ports := map[string]int{}
			for _, p := range set.Template.Spec.Containers[0].Ports {
				ports[p.Name] = p.ContainerPort
			}
			for _, p := range s.Ports {
				if n, err := strconv.Atoi(p.TargetPort); (err != nil || n == 0) && ports[p.TargetPort] == 0 {
					t.Errorf("Service %s port %s: targetPort %q names no container port of %s", name, p.Name, p.TargetPort, setNames[i])
				}
			}
		}
	}
}

// checkStatefulSet checks one StatefulSet's pod template: its arguments
// against kvd serve's flags and the founding membership (cluster,
// witnesses), its probes and ports against those arguments, its peer
// Service, its volume and its shutdown bounds.
func checkStatefulSet(t *testing.T, want k8sMember, sts k8sStatefulSet, services map[string]k8sService, configMaps map[string]map[string]string, secure bool, cluster, witnesses string) {
	stsName := want.set
	podLabels := sts.Template.Metadata.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if podLabels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if sts.PodManagementPolicy != "Parallel" {
		t.Errorf("%s: podManagementPolicy %q: want Parallel (a member is ready only once a quorum exists)", stsName, sts.PodManagementPolicy)
	}
	if !matches(sts.Selector.MatchLabels) {
		t.Errorf("%s: selector %v does not match the pod labels %v", stsName, sts.Selector.MatchLabels, podLabels)
	}

	c := sts.Template.Spec.Containers[0]
	if len(c.Command) != 2 || c.Command[0] != "/kvd" || c.Command[1] != "serve" {
		t.Errorf("%s: command %q: want [/kvd serve]", stsName, c.Command)
	}
	flags := serveArgs(t, stsName+" args", c.Args)
	for _, f := range []string{"name", "data-dir", "memcache-addr", "http-addr", "peer-addr", "initial-cluster"} {
		if flags[f] == "" {
			t.Fatalf("%s args: --%s missing", stsName, f)
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
				t.Errorf("%s: argument %q uses $(%s), which env does not define", stsName, a, m[1])
			}
		}
	}
	if flags["name"] != "$(POD_NAME)" || env["POD_NAME"] != "metadata.name" {
		t.Errorf("%s: --name=%q (POD_NAME from %q): want the pod name, which initial-cluster lists", stsName, flags["name"], env["POD_NAME"])
	}
	if env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("%s: POD_NAMESPACE comes from %q, want metadata.namespace", stsName, env["POD_NAMESPACE"])
	}

	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, flag := range map[string]string{"memcache": "memcache-addr", "http": "http-addr", "peer": "peer-addr"} {
		if got, want := ports[name], port(t, flag, flags[flag]); got != want {
			t.Errorf("%s: containerPort %s = %d, but --%s listens on %d", stsName, name, got, flag, want)
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
			t.Errorf("%s: %s: missing or not httpGet", stsName, pr.name)
			continue
		}
		if g := pr.probe.HTTPGet; g.Path != pr.path || resolve(g.Port) != httpPort {
			t.Errorf("%s: %s: GET %s on port %q (%d), want %s on --http-addr's port %d", stsName, pr.name, g.Path, g.Port, resolve(g.Port), pr.path, httpPort)
		}
		// A listener with --cert-file speaks TLS only.
		if g, want := pr.probe.HTTPGet, map[bool]string{true: "HTTPS", false: ""}[secure]; g.Scheme != want {
			t.Errorf("%s: %s: scheme %q, want %q", stsName, pr.name, g.Scheme, want)
		}
	}
	ann := sts.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(httpPort) {
		t.Errorf("%s: prometheus annotations %v: want scrape true, path /metrics, port %d", stsName, ann, httpPort)
	}

	// Peers: the headless Service names every pod, and --initial-cluster
	// must list exactly those names on the peer port; every member gets
	// the same --initial-witnesses.
	peerSvc, ok := services[sts.ServiceName]
	if !ok {
		t.Fatalf("%s: serviceName %q: no such Service", stsName, sts.ServiceName)
	}
	if peerSvc.ClusterIP != "None" || !peerSvc.PublishNotReadyAddresses || !matches(peerSvc.Selector) {
		t.Errorf("Service %s: want headless (clusterIP None), publishNotReadyAddresses, selecting the pods of %s; got %+v", sts.ServiceName, stsName, peerSvc)
	}
	if got := flags["initial-cluster"]; got != cluster {
		t.Errorf("%s: --initial-cluster=%s\nwant           %s", stsName, got, cluster)
	}
	if got := flags["initial-witnesses"]; got != witnesses {
		t.Errorf("%s: --initial-witnesses=%q, want %q", stsName, got, witnesses)
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
			t.Errorf("%s: --%s=%q, want %s: the default, the pod's host name, does not resolve in other pods", stsName, flag, flags[flag], want)
		}
	}
	// And kvd accepts the values once the kubelet has expanded them: each
	// parses as its flag, the membership validates, and the pod is a
	// witness exactly when its StatefulSet is the witnesses'.
	expand := strings.NewReplacer("$(POD_NAME)", stsName+"-0", "$(POD_NAMESPACE)", "default").Replace
	fs := serveCmd(t).Flags()
	for name, v := range flags {
		if err := fs.Set(name, expand(v)); err != nil {
			t.Errorf("%s: --%s=%s: %v", stsName, name, expand(v), err)
		}
	}
	cfg := config.Default()
	cfg.Name = stsName + "-0"
	cfg.InitialCluster = expand(flags["initial-cluster"])
	cfg.InitialWitnesses = flags["initial-witnesses"]
	cfg.PeerAddr = flags["peer-addr"]
	cfg.AdvertiseHTTPAddr, cfg.AdvertiseMemcacheAddr = expand(flags["advertise-http-addr"]), expand(flags["advertise-memcache-addr"])
	if err := cfg.Validate(); err != nil {
		t.Errorf("%s: kvd rejects the expanded configuration: %v", stsName, err)
	}
	if cfg.IsWitness() != want.witness {
		t.Errorf("%s: pod %s is a witness: %v, want %v", stsName, cfg.Name, cfg.IsWitness(), want.witness)
	}

	// The PVC template at --data-dir; a secure pod's Secrets besides it.
	dataMounts := 0
	for _, m := range c.VolumeMounts {
		if len(sts.VolumeClaimTemplates) == 1 && m.Name == sts.VolumeClaimTemplates[0].Metadata.Name && m.MountPath == flags["data-dir"] {
			dataMounts++
		}
	}
	if wantMounts := map[bool]int{false: 1, true: 3}[secure]; len(sts.VolumeClaimTemplates) != 1 || dataMounts != 1 || len(c.VolumeMounts) != wantMounts {
		t.Errorf("%s: the PVC template must be mounted at --data-dir=%s, and %d volume(s) in all (got %d)", stsName, flags["data-dir"], wantMounts, len(c.VolumeMounts))
	}
	if secure {
		checkSecurePod(t, stsName, sts, configMaps, flags)
	}
	shutdown := shutdownTimeout(t, flags)
	if grace := time.Duration(sts.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace <= stopBound(shutdown) {
		t.Errorf("%s: terminationGracePeriodSeconds %s must exceed twice --shutdown-timeout %s (the drain, then closing the stores)", stsName, grace, shutdown)
	}
	d := parseDockerfile(t)
	if uid, _, _ := strings.Cut(d.user, ":"); strconv.Itoa(sts.Template.Spec.SecurityContext.RunAsUser) != uid {
		t.Errorf("%s: runAsUser %d, but the image's USER is %s (the owner of /data)", stsName, sts.Template.Spec.SecurityContext.RunAsUser, d.user)
	}
}

// secureFlags are the settings of a member with TLS, mutual TLS and an auth
// file, each a file: checkSecurePod wants each one set, to a file in a
// read-only Secret volume.
var secureFlags = []string{"cert-file", "key-file", "peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "auth-file"}

// kvdEnv is the environment variable kvd reads flag from (KVD_ + the name
// in capitals, '_' for '-'; internal/cli/env.go).
func kvdEnv(flag string) string { return "KVD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) }

// checkSecurePod checks a secured pod template: every KVD_* variable, from
// env or a ConfigMap in envFrom, is a flag of kvd serve that accepts its
// value (as the kubelet expands it), and the security settings name files
// of the Secret volumes, mounted read-only; the per-member ones name the
// pod's own certificate, the one naming the member its peers check.
func checkSecurePod(t *testing.T, stsName string, sts k8sStatefulSet, configMaps map[string]map[string]string, args map[string]string) {
	t.Helper()
	c := sts.Template.Spec.Containers[0]
	pod := stsName + "-0"
	expand := strings.NewReplacer("$(POD_NAME)", pod, "$(POD_NAMESPACE)", "default").Replace
	vars := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		data, ok := configMaps[ef.ConfigMapRef.Name]
		if !ok {
			t.Errorf("%s: envFrom ConfigMap %s: not in the manifest", stsName, ef.ConfigMapRef.Name)
		}
		for k, v := range data {
			vars[k] = v // no $(VAR) expansion in envFrom values
		}
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "KVD_") {
			vars[e.Name] = expand(e.Value)
		}
	}
	flagOf := map[string]string{}
	serveCmd(t).Flags().VisitAll(func(f *pflag.Flag) { flagOf[kvdEnv(f.Name)] = f.Name })
	fs := serveCmd(t).Flags()
	settings := map[string]string{}
	for k, v := range vars {
		name, ok := flagOf[k]
		if !ok {
			t.Errorf("%s: environment %s: no flag of kvd serve reads it", stsName, k)
			continue
		}
		if _, both := args[name]; both {
			t.Errorf("%s: --%s both in args and as %s: say it once", stsName, name, k)
		}
		if err := fs.Set(name, v); err != nil {
			t.Errorf("%s: %s=%s: --%s rejects it: %v", stsName, k, v, name, err)
		}
		settings[name] = v
	}
	secrets := map[string]string{} // volume name → Secret
	for _, v := range sts.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	for _, flag := range secureFlags {
		file, ok := settings[flag]
		if !ok {
			t.Errorf("%s: %s (--%s) not set", stsName, kvdEnv(flag), flag)
			continue
		}
		inSecret := false
		for _, m := range c.VolumeMounts {
			if _, secret := secrets[m.Name]; secret && m.ReadOnly && filepath.Dir(file) == m.MountPath {
				inSecret = true
			}
		}
		if !inSecret {
			t.Errorf("%s: --%s=%s: want a file of a Secret volume mounted read-only", stsName, flag, file)
		}
	}
	for flag, want := range map[string]string{"cert-file": pod + ".crt", "key-file": pod + ".key", "peer-cert-file": pod + ".crt", "peer-key-file": pod + ".key"} {
		if filepath.Base(settings[flag]) != want {
			t.Errorf("%s: --%s=%s in pod %s: want its own certificate, %s", stsName, flag, settings[flag], pod, want)
		}
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

// loadConfig reads and validates one of the systemd config examples.
func loadConfig(t *testing.T, file string) *config.Config {
	t.Helper()
	cfg := config.Default()
	if err := cfg.LoadFile(filepath.Join("systemd", file)); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("systemd/%s: kvd rejects it: %v", file, err)
	}
	return &cfg
}

func TestSystemdUnitAndConfig(t *testing.T) {
	// Both examples run under the same unit: a data node's and a witness's.
	// kvd-secure.yaml is kvd.yaml secured (TestSystemdSecure).
	configs := map[string]*config.Config{"kvd.yaml": loadConfig(t, "kvd.yaml"), "kvd-witness.yaml": loadConfig(t, "kvd-witness.yaml"),
		"kvd-secure.yaml": loadConfig(t, "kvd-secure.yaml")}
	if configs["kvd.yaml"].IsWitness() || !configs["kvd-witness.yaml"].IsWitness() {
		t.Errorf("kvd.yaml is a witness: %v, kvd-witness.yaml: %v; want false and true",
			configs["kvd.yaml"].IsWitness(), configs["kvd-witness.yaml"].IsWitness())
	}
	// kvd-witness.yaml tells the data nodes which two lines of kvd.yaml to
	// change; with them, kvd.yaml founds the same cluster as a data node.
	w := configs["kvd-witness.yaml"]
	text := string(readFile(t, filepath.Join("systemd", "kvd-witness.yaml")))
	for _, line := range []string{"#   initial-cluster: " + w.InitialCluster + "\n", "#   initial-witnesses: " + w.InitialWitnesses + "\n"} {
		if !strings.Contains(text, line) {
			t.Errorf("kvd-witness.yaml: the data nodes' lines do not read %q", strings.TrimSpace(line))
		}
	}
	data := *configs["kvd.yaml"]
	data.InitialCluster, data.InitialWitnesses = w.InitialCluster, w.InitialWitnesses
	if err := data.Validate(); err != nil || data.IsWitness() {
		t.Errorf("kvd.yaml with kvd-witness.yaml's initial-cluster and initial-witnesses: %v (witness: %v); want a valid data node", err, data.IsWitness())
	}
	// And its lines for a witness that joins a running cluster, in place of
	// the initial-* ones, make a config kvd loads as a witness.
	joinLines := regexp.MustCompile(`(?m)^#   ((?:join|witness): .*)$`).FindAllStringSubmatch(text, -1)
	var joined []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "initial-") {
			joined = append(joined, line)
		}
	}
	for _, m := range joinLines {
		joined = append(joined, m[1])
	}
	if len(joinLines) != 2 {
		t.Errorf("kvd-witness.yaml: want the two lines (join:, witness:) of a witness that joins, got %q", joinLines)
	} else {
		path := filepath.Join(t.TempDir(), "kvd.yaml")
		if err := os.WriteFile(path, []byte(strings.Join(joined, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		j := config.Default()
		if err := j.LoadFile(path); err != nil {
			t.Errorf("kvd-witness.yaml with its join lines: %v", err)
		} else if err := j.Validate(); err != nil || !j.IsWitness() || j.Join == "" {
			t.Errorf("kvd-witness.yaml with its join lines: %v (witness: %v, join %q); want a valid witness that joins", err, j.IsWitness(), j.Join)
		}
	}

	unit := unitFile(t, "kvd.service")
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
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	nofile, err := strconv.Atoi(one("LimitNOFILE"))
	if err != nil {
		t.Fatalf("LimitNOFILE: %v", err)
	}
	for file, cfg := range configs {
		if want := "/var/lib/" + one("StateDirectory"); cfg.DataDir != want {
			t.Errorf("%s data-dir %q, want %s (StateDirectory)", file, cfg.DataDir, want)
		}
		if stop <= stopBound(cfg.ShutdownTimeout) {
			t.Errorf("TimeoutStopSec %s must exceed twice %s's shutdown-timeout %s, or systemd kills a node still closing its stores", stop, file, cfg.ShutdownTimeout)
		}
		if nofile < 2*cfg.MaxConnections {
			t.Errorf("LimitNOFILE %d: want at least twice %s's max-connections (%d)", nofile, file, cfg.MaxConnections)
		}
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

type composeService struct {
	Image           string            `yaml:"image"`
	Hostname        string            `yaml:"hostname"`
	Restart         string            `yaml:"restart"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	Entrypoint      []string          `yaml:"entrypoint"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	Volumes         []string          `yaml:"volumes"`
	Ports           []string          `yaml:"ports"`
	Networks        map[string]struct {
		Aliases []string `yaml:"aliases"`
	} `yaml:"networks"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Networks map[string]struct {
		Internal bool `yaml:"internal"`
	} `yaml:"networks"`
	Volumes map[string]any `yaml:"volumes"`
}

func TestComposeFiles(t *testing.T) {
	image := parseDockerfile(t)
	for file, members := range map[string]struct {
		data, witnesses []string
		// secure: TLS, mutual TLS and an auth file, made by init services
		// (checkSecureCompose).
		secure bool
	}{
		"docker-compose.yml":       {data: []string{"kvd1", "kvd2", "kvd3"}},
		"docker-compose.2node.yml": {data: []string{"kvd1", "kvd2"}},
		// Two data nodes and a witness, which clients never reach.
		"docker-compose.witness.yml": {data: []string{"kvd1", "kvd2"}, witnesses: []string{"witness"}},
		"docker-compose.secure.yml":  {data: []string{"kvd1", "kvd2", "kvd3"}, secure: true},
	} {
		t.Run(file, func(t *testing.T) {
			raw := envDefault.ReplaceAll(readFile(t, filepath.Join("compose", file)), []byte("$1"))
			var cf composeFile
			if err := yaml.Unmarshal(raw, &cf); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			names := append(slices.Clone(members.data), members.witnesses...)
			inits := 0
			if members.secure {
				inits = len(secureInits)
			}
			if len(cf.Services) != len(names)+inits {
				t.Fatalf("%d services, want %d", len(cf.Services), len(names)+inits)
			}
			if !cf.Networks["peer"].Internal {
				t.Errorf("network peer must be internal: raft traffic only")
			}
			var wantCluster []string
			for _, name := range names {
				wantCluster = append(wantCluster, fmt.Sprintf("%s=%s-peer:%d", name, name, port(t, "peer-addr", image.flags["peer-addr"])))
			}
			wantWitnesses := strings.Join(members.witnesses, ",")
			hostPorts := map[string]bool{}
			volumes := map[string]bool{}
			for _, name := range names {
				witness := slices.Contains(members.witnesses, name)
				s, ok := cf.Services[name]
				if !ok {
					t.Fatalf("service %s missing", name)
				}
				// The image's entrypoint flags come first; command's win.
				flags := serveArgs(t, name+" command", s.Command)
				if flags["name"] != name || flags["initial-cluster"] != strings.Join(wantCluster, ",") {
					t.Errorf("%s: --name=%s --initial-cluster=%s, want %s and %s", name, flags["name"], flags["initial-cluster"], name, strings.Join(wantCluster, ","))
				}
				// Every member is told the same witnesses, the witness too.
				if flags["initial-witnesses"] != wantWitnesses {
					t.Errorf("%s: --initial-witnesses=%q, want %q", name, flags["initial-witnesses"], wantWitnesses)
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
				cfg.InitialWitnesses = all["initial-witnesses"]
				if err := cfg.Validate(); err != nil {
					t.Errorf("%s: kvd rejects its flags: %v", name, err)
				}
				if cfg.IsWitness() != witness {
					t.Errorf("%s: kvd starts it as a witness: %v, want %v", name, cfg.IsWitness(), witness)
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
				// The data volume first; any other (the certificates) is
				// shared and mounted read-only.
				if len(s.Volumes) == 0 {
					t.Fatalf("%s: no volumes, want its own at %s", name, image.flags["data-dir"])
				}
				vol, mount, _ := strings.Cut(s.Volumes[0], ":")
				if _, declared := cf.Volumes[vol]; !declared || mount != image.flags["data-dir"] || volumes[vol] {
					t.Errorf("%s: volume %q: want its own named volume at %s", name, s.Volumes[0], image.flags["data-dir"])
				}
				volumes[vol] = true
				for _, v := range s.Volumes[1:] {
					shared, _, _ := strings.Cut(v, ":")
					if _, declared := cf.Volumes[shared]; !declared || !strings.HasSuffix(v, ":ro") {
						t.Errorf("%s: volume %q: want a declared named volume, mounted read-only (:ro)", name, v)
					}
				}
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
				if !published[port(t, "http-addr", all["http-addr"])] {
					t.Errorf("%s: --http-addr=%s is not published", name, all["http-addr"])
				}
				// A witness refuses every data command: a client given
				// every published memcache port must not find it.
				if mc := published[port(t, "memcache-addr", all["memcache-addr"])]; mc == witness {
					t.Errorf("%s: --memcache-addr=%s published: %v, want %v (witness: %v)", name, all["memcache-addr"], mc, !witness, witness)
				}
				grace, err := time.ParseDuration(s.StopGracePeriod)
				if err != nil || grace <= stopBound(shutdownTimeout(t, all)) {
					t.Errorf("%s: stop_grace_period %q must exceed twice --shutdown-timeout (%s): the drain, then closing the stores",
						name, s.StopGracePeriod, shutdownTimeout(t, all))
				}
				if s.Restart == "" || s.Restart == "no" {
					t.Errorf("%s: restart %q: want a restart policy", name, s.Restart)
				}
				if members.secure {
					checkSecureMember(t, cf, name, all)
				}
			}
			if members.secure {
				checkSecureInits(t, cf, image, names)
			}
		})
	}
}

// secureInits are docker-compose.secure.yml's init services: each writes
// into the certificates volume before any member starts.
var secureInits = []string{"certs", "htpasswd"}

// secureInitCmd is the kvd certs subcommand each init service runs.
var secureInitCmd = map[string]string{"certs": "cluster", "htpasswd": "htpasswd"}

// certsMount is where a secure member finds the certificates volume, and
// the volume's name: the one of its volumes that is not its data.
func certsMount(t *testing.T, name string, s composeService) (vol, mount string) {
	t.Helper()
	if len(s.Volumes) != 2 {
		t.Fatalf("%s: volumes %q: want its data and the certificates (read-only)", name, s.Volumes)
	}
	vol, rest, _ := strings.Cut(s.Volumes[1], ":")
	mount, _, _ = strings.Cut(rest, ":")
	return vol, mount
}

// checkSecureMember checks a member of a secure file: TLS, mutual TLS and
// the auth file from its own files in the certificates volume, started
// only once both init services have succeeded, and probed over https.
func checkSecureMember(t *testing.T, cf composeFile, name string, flags map[string]string) {
	t.Helper()
	s := cf.Services[name]
	_, mount := certsMount(t, name, s)
	for flag, file := range map[string]string{
		"cert-file": name + ".crt", "key-file": name + ".key",
		"peer-cert-file": name + ".crt", "peer-key-file": name + ".key", "peer-trusted-ca-file": "ca.crt",
		"auth-file": "kvd.htpasswd",
	} {
		if want := mount + "/" + file; flags[flag] != want {
			t.Errorf("%s: --%s=%q, want %s", name, flag, flags[flag], want)
		}
	}
	for _, init := range secureInits {
		if c := s.DependsOn[init].Condition; c != "service_completed_successfully" {
			t.Errorf("%s: depends_on %s: condition %q, want service_completed_successfully", name, init, c)
		}
	}
	// The image's HEALTHCHECK speaks http; a TLS listener answers https.
	test := s.Healthcheck.Test
	if len(test) < 3 || test[0] != "CMD" || test[1] != "/kvd" || test[2] != "healthcheck" {
		t.Fatalf("%s: healthcheck test %q: want [CMD /kvd healthcheck …]", name, test)
	}
	hc := commandArgs(t, name+" healthcheck", []string{"healthcheck"}, test[3:])
	if want := fmt.Sprintf("https://127.0.0.1:%d/readyz", port(t, "http-addr", flags["http-addr"])); hc["url"] != want || hc["cacert"] != mount+"/ca.crt" {
		t.Errorf("%s: healthcheck --url=%q --cacert=%q, want %s and %s/ca.crt", name, hc["url"], hc["cacert"], want, mount)
	}
}

// checkSecureInits checks the init services of a secure file: kvd certs
// cluster makes a certificate for every member, kvd certs htpasswd the
// auth file the members read, each writing into the volume the members
// mount, mounted at the image's data directory (a new named volume takes
// that directory's owner, the image's user, so the user may write to it).
func checkSecureInits(t *testing.T, cf composeFile, image dockerfile, members []string) {
	t.Helper()
	vol, _ := certsMount(t, members[0], cf.Services[members[0]])
	for _, init := range secureInits {
		s, ok := cf.Services[init]
		if !ok {
			t.Fatalf("init service %s missing", init)
		}
		if len(s.Volumes) != 1 || s.Volumes[0] != vol+":"+image.flags["data-dir"] {
			t.Errorf("%s: volumes %q, want [%s:%s]", init, s.Volumes, vol, image.flags["data-dir"])
		}
		if s.Restart != "no" {
			t.Errorf("%s: restart %q, want \"no\": it runs once per up", init, s.Restart)
		}
		if len(s.Entrypoint) < 3 || s.Entrypoint[0] != "/kvd" || s.Entrypoint[1] != "certs" || s.Entrypoint[2] != secureInitCmd[init] {
			t.Fatalf("%s: entrypoint %q: want /kvd certs %s …", init, s.Entrypoint, secureInitCmd[init])
		}
	}
	out := image.flags["data-dir"]
	certs := commandArgs(t, "certs entrypoint", []string{"certs", "cluster"}, cf.Services["certs"].Entrypoint[3:])
	if certs["out"] != out || certs["members"] != strings.Join(members, ",") {
		t.Errorf("certs: --out=%q --members=%q, want %s and %s", certs["out"], certs["members"], out, strings.Join(members, ","))
	}
	hp := cf.Services["htpasswd"]
	h := commandArgs(t, "htpasswd entrypoint", []string{"certs", "htpasswd"}, hp.Entrypoint[3:])
	if h["file"] != out+"/kvd.htpasswd" || h["user"] == "" {
		t.Errorf("htpasswd: --file=%q --user=%q, want %s/kvd.htpasswd and a user", h["file"], h["user"], out)
	}
	// The password comes from the environment, and the file has none of
	// its own: compose refuses to start without it (${VAR:?message}).
	if v := hp.Environment[h["password-env"]]; h["password-env"] == "" || !strings.HasPrefix(v, "${"+h["password-env"]+":?") {
		t.Errorf("htpasswd: --password-env=%q, environment %q: want a variable compose requires (${VAR:?…})", h["password-env"], v)
	}
}

// commandArgs parses args as the kvd command at path would (--flag=value
// only, as serveArgs) and returns every flag's value.
func commandArgs(t *testing.T, where string, path, args []string) map[string]string {
	t.Helper()
	cmd, _, err := cli.NewRoot(io.Discard, io.Discard).Find(path)
	if err != nil || cmd.Name() != path[len(path)-1] {
		t.Fatalf("kvd %s: %v", strings.Join(path, " "), err)
	}
	out := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("%s: argument %q: want --flag=value", where, a)
			continue
		}
		if err := cmd.Flags().Set(name, value); err != nil {
			t.Errorf("%s: --%s=%s: not a flag of kvd %s, or not its value: %v", where, name, value, strings.Join(path, " "), err)
			continue
		}
		out[name] = value
	}
	return out
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

// unitFile reads a systemd unit file or drop-in of deploy/systemd as its
// key=value lines, sections aside.
func unitFile(t *testing.T, file string) map[string][]string {
	t.Helper()
	unit := map[string][]string{}
	for _, line := range strings.Split(string(readFile(t, filepath.Join("systemd", file))), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: %q is not key=value", file, line)
			continue
		}
		unit[k] = append(unit[k], v)
	}
	return unit
}

// TestSystemdSecure checks kvd-secure.yaml and its drop-in kvd-secure.conf:
// every security setting is given, and the secrets (the private key, the
// auth file) are systemd credentials: files in the credentials directory of
// kvd.service that a LoadCredential= line of the drop-in loads, from a
// source outside it. systemd-analyze, where installed, checks the unit with
// the drop-in.
func TestSystemdSecure(t *testing.T) {
	cfg := loadConfig(t, "kvd-secure.yaml")
	if cfg.IsWitness() {
		t.Errorf("kvd-secure.yaml: a witness; want a data node like kvd.yaml")
	}
	settings := map[string]string{
		"cert-file": cfg.CertFile, "key-file": cfg.KeyFile,
		"peer-cert-file": cfg.PeerCertFile, "peer-key-file": cfg.PeerKeyFile, "peer-trusted-ca-file": cfg.PeerTrustedCAFile,
		"auth-file": cfg.AuthFile,
	}
	for _, flag := range secureFlags {
		if settings[flag] == "" {
			t.Errorf("kvd-secure.yaml: %s not set", flag)
		}
	}
	// $CREDENTIALS_DIRECTORY of the unit kvd.service.
	const credDir = "/run/credentials/kvd.service"
	creds := map[string]string{}
	for _, v := range unitFile(t, "kvd-secure.conf")["LoadCredential"] {
		name, src, ok := strings.Cut(v, ":")
		if !ok || strings.HasPrefix(src, credDir) || !filepath.IsAbs(src) {
			t.Errorf("kvd-secure.conf: LoadCredential=%s: want NAME:/absolute/source", v)
		}
		creds[name] = src
	}
	for _, flag := range []string{"key-file", "peer-key-file", "auth-file"} {
		v := settings[flag]
		if filepath.Dir(v) != credDir {
			t.Errorf("kvd-secure.yaml: %s: %s: want a credential, in %s", flag, v, credDir)
		} else if _, ok := creds[filepath.Base(v)]; !ok {
			t.Errorf("kvd-secure.yaml: %s: %s: no LoadCredential=%s:… in kvd-secure.conf", flag, v, filepath.Base(v))
		}
	}
	if cfg.KeyFile != cfg.PeerKeyFile || cfg.CertFile != cfg.PeerCertFile {
		t.Errorf("kvd-secure.yaml: the member's pair serves clients and peers: key-file %s, peer-key-file %s, cert-file %s, peer-cert-file %s",
			cfg.KeyFile, cfg.PeerKeyFile, cfg.CertFile, cfg.PeerCertFile)
	}
	if want := cfg.Name + ".crt"; filepath.Base(cfg.CertFile) != want {
		t.Errorf("kvd-secure.yaml: cert-file %s, want the member's own, %s", cfg.CertFile, want)
	}
	if want := cfg.Name + ".key"; filepath.Base(creds[filepath.Base(cfg.KeyFile)]) != want {
		t.Errorf("kvd-secure.conf: credential %s loads %s, want the member's own key, %s", filepath.Base(cfg.KeyFile), creds[filepath.Base(cfg.KeyFile)], want)
	}

	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze not installed: skipping systemd's own check")
		return
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "kvd.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{"kvd.service": "kvd.service", "kvd-secure.conf": "kvd.service.d/secure.conf"} {
		if err := os.WriteFile(filepath.Join(dir, dst), readFile(t, filepath.Join("systemd", src)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("systemd-analyze", "verify", "kvd.service")
	cmd.Dir = dir
	// The trailing ':' keeps systemd's own unit directories after dir.
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
	out, _ := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.Contains(line, "is not executable") {
			t.Errorf("systemd-analyze verify kvd.service with kvd-secure.conf: %s", line)
		}
	}
}
