package robustness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTopology(t *testing.T) {
	tests := []struct {
		in      string
		want    Topology
		wantErr bool
	}{
		{in: "1", want: OneNode},
		{in: "1n", want: OneNode},
		{in: "3n", want: ThreeNodes},
		{in: "2n+1w", want: TwoAndWitness},
		{in: "2+1", want: TwoAndWitness},
		{in: "witness", want: TwoAndWitness},
		{in: "2n", wantErr: true},
		{in: "3n+1w", wantErr: true},
		{in: "0n", wantErr: true},
		{in: "2n+w", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseTopology(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseTopology(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	for _, topo := range []Topology{OneNode, ThreeNodes, TwoAndWitness} {
		if got, err := ParseTopology(topo.String()); err != nil || got != topo {
			t.Errorf("ParseTopology(%q) = %v, %v", topo, got, err)
		}
	}
	if got := strings.Join(TwoAndWitness.WitnessNames(), ","); got != "n3" {
		t.Errorf("2n+1w witnesses %q, want n3", got)
	}
	if got := ThreeNodes.WitnessNames(); got != nil {
		t.Errorf("3n witnesses %q, want none", got)
	}
}

func TestFixedTopology(t *testing.T) {
	tests := []struct {
		topology string
		size     int
		want     Topology
		wantErr  bool
	}{
		{want: Topology{}},
		{size: 1, want: OneNode},
		{size: 3, want: ThreeNodes},
		{topology: "2n+1w", want: TwoAndWitness},
		{topology: "3n", size: 3, want: ThreeNodes},
		{topology: "2n+1w", size: 3, wantErr: true},
		{size: 2, wantErr: true},
	}
	for _, tt := range tests {
		got, err := fixedTopology(tt.topology, tt.size)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("fixedTopology(%q, %d) = %v, %v; want %v, error %v", tt.topology, tt.size, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestPlansCoverEveryFaultAndTopology: what CI runs (make robustness
// COUNT=28 SEED=1, a run per fault kind) injects every fault kind at least once, a fair share of
// the runs with a witness; a fixed topology runs only the faults that
// apply to it.
func TestPlansCoverEveryFaultAndTopology(t *testing.T) {
	registry := Faults()
	runs := len(registry)
	ps, err := makePlans(registry, "", Topology{}, 1, runs)
	if err != nil {
		t.Fatal(err)
	}
	faults, topos := map[string]int{}, map[Topology]int{}
	for _, p := range ps {
		faults[p.fault.Name]++
		topos[p.topo]++
		if !p.fault.Fits(p.topo) {
			t.Errorf("seed %d: %s on %s, which it does not fit", p.seed, p.fault.Name, p.topo)
		}
	}
	for _, f := range registry {
		if faults[f.Name] == 0 {
			t.Errorf("fault %s never runs", f.Name)
		}
	}
	// (Seed 1 happens to draw no single node, as before witnesses.)
	if topos[TwoAndWitness] < runs/4 || topos[ThreeNodes] < runs/2 {
		t.Errorf("topologies of %d runs from seed 1: %v", runs, topos)
	}
	t.Logf("%d runs from seed 1: %v", runs, topos)

	// Over many seeds: a third with a witness, every fault's runs alike.
	many, err := makePlans(registry, "", Topology{}, 1, 3000)
	if err != nil {
		t.Fatal(err)
	}
	perFault := map[string]map[Topology]int{}
	for _, p := range many {
		if perFault[p.fault.Name] == nil {
			perFault[p.fault.Name] = map[Topology]int{}
		}
		perFault[p.fault.Name][p.topo]++
	}
	for name, by := range perFault {
		runs := by[OneNode] + by[ThreeNodes] + by[TwoAndWitness]
		if w := by[TwoAndWitness]; 3*w < runs-3 || 3*w > runs+3 {
			t.Errorf("%s: 2n+1w in %d of %d runs, want a third: %v", name, w, runs, by)
		}
	}

	ws, err := makePlans(registry, "", TwoAndWitness, 7, 60)
	if err != nil {
		t.Fatal(err)
	}
	clear(faults)
	for _, p := range ws {
		if p.topo != TwoAndWitness {
			t.Errorf("seed %d: topology %s under -topology=2n+1w", p.seed, p.topo)
		}
		faults[p.fault.Name]++
	}
	if len(faults) != len(registry) {
		t.Errorf("-topology=2n+1w runs %d fault kinds of %d", len(faults), len(registry))
	}
	if _, err := makePlans(registry, "snapshot-follower", OneNode, 1, 1); err == nil {
		t.Error("a fault was planned on a topology it does not fit")
	}
}

// TestResultTable: the table adds up every run of a fault kind, a
// topology and the whole campaign; undecided and vacuous runs are their
// own columns and count as failed runs too.
func TestResultTable(t *testing.T) {
	got := resultTable([]runSummary{
		{Fault: "kill-leader", Topology: "3n", Ops: 10, Outcome: OutcomePass},
		{Fault: "kill-leader", Topology: "2n+1w", Ops: 5, Unknown: 1, Outcome: OutcomePass},
		{Fault: "kill-all", Topology: "1n", Ops: 3, Failures: []string{"x"}, Lost: []string{"k"}, Outcome: OutcomeFailed},
		{Fault: "kill-all", Topology: "3n", Ops: 7, Unknown: 2, Failures: []string{"undecided: …"}, Outcome: OutcomeUndecided,
			Undecided: []UndecidedKey{{Key: "r1", Ops: 7, Unknown: 2, Stage: "history"}}, Porcupine: "Unknown"},
		{Fault: "pause-leader", Topology: "3n", Ops: 4, Failures: []string{"vacuous run: …"}, Vacuous: []string{"…"},
			Outcome: OutcomeVacuous, Illegal: []string{"a", "b"}, Divergent: []string{"n2"}},
		{Fault: "clock-skew", Topology: "3n", Ops: 6, Failures: []string{"expiry: …"}, Outcome: OutcomeFailed,
			Expiry: &ExpiryResult{Ops: 40, Violations: []string{"…"}}},
	})
	for _, want := range []string{
		"| fault | runs | topologies | ops checked | unknown writes | violating keys | lost-write keys | divergent replicas | expiry probe ops | expiry violations | undecided runs | vacuous runs | failed runs |",
		"| kill-leader | 2 | 2n+1w×1 3n×1 | 15 | 1 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |",
		"| kill-all | 2 | 1n×1 3n×1 | 10 | 2 | 0 | 1 | 0 | 0 | 0 | 1 | 0 | 2 |",
		"| pause-leader | 1 | 3n×1 | 4 | 0 | 2 | 0 | 1 | 0 | 0 | 0 | 1 | 1 |",
		"| clock-skew | 1 | 3n×1 | 6 | 0 | 0 | 0 | 0 | 40 | 1 | 0 | 0 | 1 |",
		"| all 2n+1w | 1 | 2n+1w×1 | 5 | 1 |",
		"| all 3n | 4 | 3n×4 | 27 | 2 | 2 | 0 | 1 | 40 | 1 | 1 | 1 | 3 |",
		"| total | 6 | 1n×1 2n+1w×1 3n×4 | 35 | 3 | 2 | 1 | 1 | 40 | 1 | 1 | 1 | 4 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

func TestLedBy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n1.log")
	log := `time=x level=INFO msg="leader changed" component=replica from=0 to=12 term=2
time=x level=INFO msg="something else" to=34 term=3
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if l := ledBy(path, 12); !strings.Contains(l, "to=12") {
		t.Errorf("ledBy 12 = %q", l)
	}
	for _, id := range []uint64{1, 34, 123} {
		if l := ledBy(path, id); l != "" {
			t.Errorf("ledBy %d = %q, want none", id, l)
		}
	}
}
