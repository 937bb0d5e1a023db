package robustness

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

var flagScenarios = flag.String("scenarios", os.Getenv("ROBUSTNESS_SCENARIOS"), "named scenarios from testdata/scenarios.json to run: all, or comma-separated names (default: none)")

// scenario is a named run that once found something (or proves that the
// checker can): its seed and fault, and what it is expected to show.
type scenario struct {
	Name  string `json:"name"`
	Note  string `json:"note"`
	Seed  uint64 `json:"seed"`
	Fault string `json:"fault"`
	// Topology is as -topology takes it (1n, 3n, 2n+1w); "" is Size data
	// members.
	Topology string   `json:"topology,omitempty"`
	Size     int      `json:"size,omitempty"`
	Duration string   `json:"duration"`
	KVDArgs  []string `json:"kvd_args"`
	// Expect is pass (a fixed bug stays fixed), violation (the run must
	// fail: a self-test of the checks) or known-bug (open: a reproduction
	// is reported, no reproduction is not an error).
	Expect string `json:"expect"`
}

func TestScenarios(t *testing.T) {
	if *flagScenarios == "" {
		t.Skip("no -scenarios given")
	}
	b, err := os.ReadFile(filepath.Join("testdata", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all []scenario
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatalf("testdata/scenarios.json: %v", err)
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*flagScenarios, ",") {
		want[strings.TrimSpace(n)] = true
	}
	bin := kvdproc.Binary(t)
	for _, sc := range all {
		if !want["all"] && !want[sc.Name] {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			f, err := FaultByName(sc.Fault)
			if err != nil {
				t.Fatal(err)
			}
			topo, err := fixedTopology(sc.Topology, sc.Size)
			if err != nil || topo == (Topology{}) {
				t.Fatalf("topology %q, size %d: %v", sc.Topology, sc.Size, err)
			}
			d, err := time.ParseDuration(sc.Duration)
			if err != nil {
				t.Fatalf("duration: %v", err)
			}
			cfg := Config{Binary: bin, Dir: t.TempDir(), Seed: sc.Seed, Fault: f, Topology: topo, Duration: d,
				Clients: 6, Timing: DefaultTiming, ExtraArgs: sc.KVDArgs, CheckTimeout: 60 * time.Second, Logf: t.Logf}
			ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
			defer cancel()
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			var out string
			if res.Failed() {
				out = filepath.Join(artifactsRoot(t), "scenario-"+sc.Name)
				if err := SaveArtifacts(out, cfg, res, "go test ./internal/testing/robustness -run TestScenarios -count=1 -v -args -scenarios="+sc.Name); err != nil {
					t.Errorf("save artifacts: %v", err)
				}
			}
			switch {
			case sc.Expect == "pass" && res.Failed():
				t.Errorf("regressed (artifacts in %s):\n  %s", out, strings.Join(res.Failures, "\n  "))
			case sc.Expect == "violation" && res.Outcome() != OutcomeFailed:
				// Undecided or vacuous is not a violation found.
				t.Errorf("the checks found nothing in a run that must fail (outcome %s): %s", res.Outcome(), sc.Note)
			case sc.Expect == "known-bug" && res.Failed():
				t.Logf("known bug reproduced (artifacts in %s):\n  %s", out, strings.Join(res.Failures, "\n  "))
			case sc.Expect == "known-bug":
				t.Logf("known bug not reproduced this time (timing-dependent)")
			}
		})
	}
}
