package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kvd-project/kvd/internal/cli"
)

// saveArgs parses args as `kvd snapshot save` would, the authority on its
// flag names, and returns the value of each (only --flag=value, as for
// serve). A FILE argument is refused: a scheduled job names none (--dir).
func saveArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	root := cli.NewRoot(io.Discard, io.Discard)
	cmd, _, err := root.Find([]string{"snapshot", "save"})
	if err != nil || cmd.Name() != "save" {
		t.Fatalf("kvd snapshot save command: %v", err)
	}
	out := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("%s: argument %q: want --flag=value (a scheduled save names no FILE: --dir does)", where, a)
			continue
		}
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("%s: --%s is not a flag of kvd snapshot save", where, name)
			continue
		}
		out[name] = value
	}
	for _, f := range []string{"dir", "keep", "endpoints", "timeout"} {
		if out[f] == "" {
			t.Errorf("%s: want --%s", where, f)
		}
	}
	return out
}

// checkSaveTimeout: the job's own bound must exceed the save's --timeout,
// so that a slow save ends with kvd's error, not a kill.
func checkSaveTimeout(t *testing.T, where string, flags map[string]string, bound time.Duration) {
	t.Helper()
	d, err := time.ParseDuration(flags["timeout"])
	if err != nil || d <= 0 || d >= bound {
		t.Errorf("%s: --timeout=%s: want a duration below the job's bound %s", where, flags["timeout"], bound)
	}
}

type k8sCronJob struct {
	Schedule          string `yaml:"schedule"`
	ConcurrencyPolicy string `yaml:"concurrencyPolicy"`
	JobTemplate       struct {
		Spec struct {
			ActiveDeadlineSeconds int `yaml:"activeDeadlineSeconds"`
			Template              struct {
				Spec struct {
					SecurityContext struct {
						RunAsUser int `yaml:"runAsUser"`
					} `yaml:"securityContext"`
					Containers []struct {
						Image        string   `yaml:"image"`
						Command      []string `yaml:"command"`
						Args         []string `yaml:"args"`
						VolumeMounts []struct {
							Name      string `yaml:"name"`
							MountPath string `yaml:"mountPath"`
						} `yaml:"volumeMounts"`
					} `yaml:"containers"`
					Volumes []struct {
						Name                  string `yaml:"name"`
						PersistentVolumeClaim struct {
							ClaimName string `yaml:"claimName"`
						} `yaml:"persistentVolumeClaim"`
					} `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	} `yaml:"jobTemplate"`
}

// objects decodes a manifest's documents by kind and name.
func objects(t *testing.T, file string) map[string]k8sObject {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, filepath.Join("kubernetes", file))))
	out := map[string]k8sObject{}
	for {
		var obj k8sObject
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if obj.Kind != "" {
			out[obj.Kind+"/"+obj.Metadata.Name] = obj
		}
	}
}

// The CronJob runs kvd snapshot save with its real flags, into a mounted
// claim the manifest declares, against the client Service and HTTP port
// kvd.yaml defines, in the same image as the members.
func TestKubernetesBackupCronJob(t *testing.T) {
	objs := objects(t, "kvd-backup-cronjob.yaml")
	obj, ok := objs["CronJob/kvd-backup"]
	if !ok {
		t.Fatalf("kvd-backup-cronjob.yaml: no CronJob kvd-backup among %v", objs)
	}
	var cj k8sCronJob
	if err := obj.Spec.Decode(&cj); err != nil {
		t.Fatal(err)
	}
	if cj.Schedule == "" || cj.ConcurrencyPolicy != "Forbid" {
		t.Errorf("schedule %q, concurrencyPolicy %q: want a schedule and Forbid (one save at a time)", cj.Schedule, cj.ConcurrencyPolicy)
	}
	pod := cj.JobTemplate.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if strings.Join(c.Command, " ") != "/kvd snapshot save" {
		t.Errorf("command %q: want /kvd snapshot save", c.Command)
	}
	flags := saveArgs(t, "kvd-backup-cronjob.yaml", c.Args)
	checkSaveTimeout(t, "kvd-backup-cronjob.yaml", flags, time.Duration(cj.JobTemplate.Spec.ActiveDeadlineSeconds)*time.Second)

	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath != flags["dir"] {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name {
				_, declared := objs["PersistentVolumeClaim/"+v.PersistentVolumeClaim.ClaimName]
				mounted = declared
			}
		}
	}
	if !mounted {
		t.Errorf("--dir=%s: want the mount path of a PersistentVolumeClaim the manifest declares", flags["dir"])
	}

	// The members' manifest: the same image, user, Service and port.
	members := objects(t, "kvd.yaml")
	var sts k8sStatefulSet
	stsObj := members["StatefulSet/kvd"]
	if err := stsObj.Spec.Decode(&sts); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Image, kvdImage(t, members); got != want {
		t.Errorf("image %q, the members run %q: want the same", got, want)
	}
	if got, want := pod.SecurityContext.RunAsUser, sts.Template.Spec.SecurityContext.RunAsUser; got != want {
		t.Errorf("runAsUser %d, the members run as %d: want the same", got, want)
	}
	u, err := url.Parse(flags["endpoints"])
	if err != nil {
		t.Fatalf("--endpoints=%q: %v", flags["endpoints"], err)
	}
	var svc k8sService
	svcObj := members["Service/"+u.Hostname()]
	if err := svcObj.Spec.Decode(&svc); err != nil || len(svc.Ports) == 0 {
		t.Fatalf("--endpoints=%s: want the client Service of kvd.yaml (%v)", flags["endpoints"], err)
	}
	found := false
	for _, p := range svc.Ports {
		found = found || (p.Name == "http" && u.Port() == strconv.Itoa(p.Port))
	}
	if !found {
		t.Errorf("--endpoints=%s: want Service %s's http port", flags["endpoints"], u.Hostname())
	}
}

func kvdImage(t *testing.T, objs map[string]k8sObject) string {
	t.Helper()
	var spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Image string `yaml:"image"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	}
	obj := objs["StatefulSet/kvd"]
	if err := obj.Spec.Decode(&spec); err != nil || len(spec.Template.Spec.Containers) == 0 {
		t.Fatalf("kvd.yaml StatefulSet kvd: %v", err)
	}
	return spec.Template.Spec.Containers[0].Image
}

// systemdUnit reads a unit file's key=value lines.
func systemdUnit(t *testing.T, file string) map[string][]string {
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

// kvd-backup.service runs kvd snapshot save with its real flags into its
// own StateDirectory, under a bound above the save's; the timer starts it.
func TestSystemdBackupUnits(t *testing.T) {
	svc := systemdUnit(t, "kvd-backup.service")
	if len(svc["ExecStart"]) != 1 || len(svc["StateDirectory"]) != 1 || len(svc["TimeoutStartSec"]) != 1 {
		t.Fatalf("kvd-backup.service: want one ExecStart=, StateDirectory= and TimeoutStartSec=, got %q", svc)
	}
	exe := strings.Fields(svc["ExecStart"][0])
	if len(exe) < 3 || exe[1] != "snapshot" || exe[2] != "save" {
		t.Fatalf("ExecStart=%q: want <kvd> snapshot save …", exe)
	}
	flags := saveArgs(t, "kvd-backup.service ExecStart", exe[3:])
	if want := "/var/lib/" + svc["StateDirectory"][0]; flags["dir"] != want {
		t.Errorf("--dir=%s: want %s, the StateDirectory (the only place a DynamicUser may write)", flags["dir"], want)
	}
	if u, err := url.Parse(flags["endpoints"]); err != nil || u.Port() != "11280" {
		t.Errorf("--endpoints=%s: want a member's HTTP port, 11280 as in kvd.yaml", flags["endpoints"])
	}
	bound, err := time.ParseDuration(strings.ReplaceAll(svc["TimeoutStartSec"][0], "min", "m"))
	if err != nil {
		t.Fatalf("TimeoutStartSec=%s: %v", svc["TimeoutStartSec"][0], err)
	}
	checkSaveTimeout(t, "kvd-backup.service", flags, bound)
	if got := svc["Type"]; len(got) != 1 || got[0] != "oneshot" {
		t.Errorf("Type=%q: want oneshot", got)
	}
	timer := systemdUnit(t, "kvd-backup.timer")
	if len(timer["OnCalendar"]) == 0 || strings.Join(timer["Unit"], "") != "kvd-backup.service" {
		t.Errorf("kvd-backup.timer: OnCalendar=%q Unit=%q: want a calendar and kvd-backup.service", timer["OnCalendar"], timer["Unit"])
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze not installed: skipping systemd's own check")
		return
	}
	out, _ := exec.Command("systemd-analyze", "verify", filepath.Join("systemd", "kvd-backup.service"), filepath.Join("systemd", "kvd-backup.timer")).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.Contains(line, "is not executable") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}
