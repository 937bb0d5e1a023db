package robustness

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// Knobs: flags after -args, or the ROBUSTNESS_* environment variables
// (flags win). The defaults keep a plain `go test ./...` short.
var (
	flagRuns     = flag.Int("runs", envInt("ROBUSTNESS_RUNS", 2), "number of faulted runs")
	flagDuration = flag.Duration("duration", envDuration("ROBUSTNESS_DURATION", 4*time.Second), "client traffic per run")
	flagSeed     = flag.Uint64("seed", envUint("ROBUSTNESS_SEED", 0), "first run's seed; run i uses seed+i (0: from the clock)")
	flagFaults   = flag.String("faults", os.Getenv("ROBUSTNESS_FAULTS"), "comma-separated faults to cycle through (default: all)")
	flagSize     = flag.Int("size", envInt("ROBUSTNESS_SIZE", 0), "data members for every run, no witness (1 or 3; short for -topology=1n or 3n)")
	flagTopology = flag.String("topology", os.Getenv("ROBUSTNESS_TOPOLOGY"), "cluster shape for every run: 1n, 3n, 2n+1w (or witness); default: drawn per run from its seed")
	flagClients  = flag.Int("clients", envInt("ROBUSTNESS_CLIENTS", 6), "sequential clients per run")
	flagKVDArgs  = flag.String("kvd-args", os.Getenv("ROBUSTNESS_KVD_ARGS"), "extra flags for every kvd serve, space-separated (e.g. --read-consistency=local to see a violation caught)")
	flagSecure   = flag.Bool("secure", envBool("ROBUSTNESS_SECURE"), "TLS on client ports, mutual TLS between members, authenticated clients (certificates made per run)")
)

func envBool(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envUint(name string, def uint64) uint64 {
	if v, err := strconv.ParseUint(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// artifactsRoot is $ROBUSTNESS_OUT, else bench/out/robustness in the
// checkout (gitignored): t.TempDir would delete the evidence.
func artifactsRoot(t *testing.T) string {
	if d := os.Getenv("ROBUSTNESS_OUT"); d != "" {
		return d
	}
	d, err := filepath.Abs(filepath.Join("..", "..", "..", "bench", "out", "robustness"))
	if err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	return d
}

// plan is one run's schedule, fixed by its seed.
type plan struct {
	seed  uint64
	fault Fault
	topo  Topology
}

func plans(t *testing.T) []plan {
	topo, err := fixedTopology(*flagTopology, *flagSize)
	if err != nil {
		t.Fatal(err)
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()) % 1_000_000_000
	}
	ps, err := makePlans(Faults(), *flagFaults, topo, seed, *flagRuns)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// fixedTopology reads -topology and -size: the zero Topology when neither
// is given (drawn per run).
func fixedTopology(topology string, size int) (Topology, error) {
	var fromSize Topology
	switch size {
	case 0:
	case 1:
		fromSize = OneNode
	case 3:
		fromSize = ThreeNodes
	default:
		return Topology{}, fmt.Errorf("-size %d: want 1 or 3 (or -topology)", size)
	}
	if topology == "" {
		return fromSize, nil
	}
	t, err := ParseTopology(topology)
	if err != nil {
		return Topology{}, fmt.Errorf("-topology: %w", err)
	}
	if size != 0 && t != fromSize {
		return Topology{}, fmt.Errorf("-size %d and -topology %s disagree", size, t)
	}
	return t, nil
}

// makePlans is the schedule of runs: run i has seed s = first+i and the
// fault at s modulo the list (every fault of the registry, or the named
// ones; with a fixed topology and no names, the registry's faults that
// apply to it). Unless fixed, the topology follows from the seed too:
//
//   - two data members and a witness when (s + s/len(list)) % 3 == 0 and
//     the fault allows it: a third of every pass through the list, and a
//     fault's turn comes every third pass, so that any run of the list's
//     length (what CI runs) has its share of witness runs, not a share
//     left to chance;
//   - otherwise one node for a quarter of the runs whose fault allows it,
//     drawn from the seed;
//   - otherwise three data members.
func makePlans(registry []Fault, names string, topo Topology, first uint64, runs int) ([]plan, error) {
	var faults []Fault
	if names != "" {
		for _, name := range strings.Split(names, ",") {
			f, err := FaultByName(strings.TrimSpace(name))
			if err != nil {
				return nil, fmt.Errorf("-faults: %w", err)
			}
			faults = append(faults, f)
		}
	} else {
		for _, f := range registry {
			if topo == (Topology{}) || f.Fits(topo) {
				faults = append(faults, f)
			}
		}
	}
	if len(faults) == 0 {
		return nil, fmt.Errorf("no fault applies to topology %s", topo)
	}
	var out []plan
	for i := range runs {
		s := first + uint64(i)
		f := faults[s%uint64(len(faults))]
		rng := rand.New(rand.NewPCG(s, 0x73697a65))
		t := topo
		if t == (Topology{}) {
			// Drawn whatever the witness turn, so that the other seeds'
			// choice of one node stays what it was before witnesses.
			single := rng.IntN(4) == 0
			switch {
			case (s+s/uint64(len(faults)))%3 == 0 && f.Fits(TwoAndWitness):
				t = TwoAndWitness
			case single && f.Fits(OneNode):
				t = OneNode
			default:
				t = ThreeNodes
			}
		}
		if !f.Fits(t) {
			return nil, fmt.Errorf("fault %s does not apply to topology %s", f.Name, t)
		}
		out = append(out, plan{seed: s, fault: f, topo: t})
	}
	return out, nil
}

// runSummary is one line of the summary file.
type runSummary struct {
	Seed        uint64 `json:"seed"`
	Fault       string `json:"fault"`
	Topology    string `json:"topology"`
	Ops         int    `json:"ops"`
	Unknown     int    `json:"unknown"`
	FailedReads int    `json:"failed_reads"`
	Porcupine   string `json:"porcupine"`
	// Outcome is pass, failed, undecided or vacuous (Result.Outcome).
	Outcome   string         `json:"outcome"`
	Phases    Phases         `json:"phases"`
	Illegal   []string       `json:"illegal_keys,omitempty"`
	Lost      []string       `json:"lost_keys,omitempty"`
	Divergent []string       `json:"divergent,omitempty"`
	Undecided []UndecidedKey `json:"undecided_keys,omitempty"`
	Vacuous   []string       `json:"vacuous,omitempty"`
	// Expiry: the expiry probe's result, for faults that run it.
	Expiry    *ExpiryResult `json:"expiry,omitempty"`
	Failures  []string      `json:"failures,omitempty"`
	Artifacts string        `json:"artifacts,omitempty"`
}

func TestRobustness(t *testing.T) {
	if testing.Short() {
		t.Skip("real clusters under faults; run make robustness")
	}
	root := artifactsRoot(t)
	ps := plans(t)
	mode := "" // names a secured run's subtest, artifacts and summary
	if *flagSecure {
		mode = "-tls"
	}
	var sums []runSummary
	start := time.Now()
	for i, p := range ps {
		name := fmt.Sprintf("%03d-%s-%s-seed%d%s", i, p.fault.Name, p.topo, p.seed, mode)
		t.Run(name, func(t *testing.T) {
			bin := kvdproc.Binary(t)
			if NeedsFailpoints(p.fault) {
				bin = kvdproc.FailpointBinary(t)
			}
			cfg := Config{
				Binary: bin, Dir: t.TempDir(), Seed: p.seed, Fault: p.fault, Topology: p.topo,
				Duration: *flagDuration, Clients: *flagClients, Timing: DefaultTiming,
				ExtraArgs: strings.Fields(*flagKVDArgs), Secure: *flagSecure, CheckTimeout: 60 * time.Second, Logf: t.Logf,
			}
			ctx, cancel := context.WithTimeout(context.Background(), *flagDuration+5*time.Minute)
			defer cancel()
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			s := runSummary{Seed: p.seed, Fault: p.fault.Name, Topology: p.topo.String(), Ops: res.Stats.Ops,
				Unknown: res.Stats.Unknown, FailedReads: res.Stats.FailedReads, Porcupine: string(res.Verdict.Result),
				Outcome: res.Outcome(), Phases: res.Phases, Illegal: res.Verdict.IllegalKeys, Lost: res.Verdict.LostKeys,
				Divergent: res.Divergent, Undecided: res.Verdict.Undecided, Vacuous: res.Vacuous, Failures: res.Failures, Expiry: res.Expiry}
			t.Logf("%s: %d ops (%d reads, %d writes of which %d unknown; %d failed reads dropped; traffic %s), porcupine %s, applied %d, digests %v",
				res.Outcome(), res.Stats.Ops, res.Stats.Reads, res.Stats.Writes, res.Stats.Unknown, res.Stats.FailedReads,
				res.Phases, res.Verdict.Result, res.Applied, res.Digests)
			if res.Failed() {
				out := filepath.Join(root, fmt.Sprintf("%d-%s-%s%s", p.seed, p.fault.Name, p.topo, mode))
				repro := fmt.Sprintf("go test ./internal/testing/robustness -run TestRobustness -count=1 -v -args -runs=1 -seed=%d -faults=%s -topology=%s -duration=%s -clients=%d",
					p.seed, p.fault.Name, p.topo, *flagDuration, *flagClients)
				if *flagSecure {
					repro += " -secure"
				}
				if *flagKVDArgs != "" {
					repro += fmt.Sprintf(" -kvd-args=%q", *flagKVDArgs)
				}
				if err := SaveArtifacts(out, cfg, res, repro); err != nil {
					t.Errorf("save artifacts: %v", err)
				}
				s.Artifacts = out
				t.Errorf("run %s; artifacts in %s\nreproduce: %s\n  %s", res.Outcome(), out, repro, strings.Join(res.Failures, "\n  "))
			}
			sums = append(sums, s)
		})
	}
	logTable(t, sums, time.Since(start))
	// A plain go test ./... leaves nothing behind; make robustness (which
	// sets -runs) keeps a summary next to the artifacts.
	explicit := os.Getenv("ROBUSTNESS_RUNS") != ""
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "runs" })
	if !explicit {
		return
	}
	if err := os.MkdirAll(root, 0o755); err == nil {
		path := filepath.Join(root, fmt.Sprintf("summary-%d-%druns%s.json", ps[0].seed, len(ps), mode))
		if err := writeJSON(path, sums); err != nil {
			t.Errorf("summary: %v", err)
		} else {
			t.Logf("summary: %s", path)
		}
	}
}

// logTable prints the per-fault totals the docs' results table is made of,
// then the totals of each topology.
func logTable(t *testing.T, sums []runSummary, took time.Duration) {
	t.Logf("%d runs in %s, %s of traffic each:%s", len(sums), took.Round(time.Second), *flagDuration, resultTable(sums))
}

// resultTable is logTable's table: a row per fault (in the order of first
// appearance) with the topologies its runs had, a row per topology, and
// the total. Undecided and vacuous count runs with any undecided key or
// any vacuity finding; failed counts every run that did not pass. Expiry
// probe ops and expiry violations (items served after their expiry or
// hidden before it, expiry.go) are counted apart from the violating keys
// of the linearizability check; a run with one fails all the same.
func resultTable(sums []runSummary) string {
	type row struct {
		runs, ops, unknown, illegal, lost, divergent, undecided, vacuous, failed int
		probeOps, expiryViolations                                               int
		topos                                                                    map[string]int
	}
	rows := map[string]*row{}
	var names, topoNames []string
	get := func(key string, list *[]string) *row {
		r := rows[key]
		if r == nil {
			r = &row{topos: map[string]int{}}
			rows[key] = r
			*list = append(*list, key)
		}
		return r
	}
	total := &row{topos: map[string]int{}}
	for _, s := range sums {
		for _, x := range []*row{get(s.Fault, &names), get("all "+s.Topology, &topoNames), total} {
			x.runs++
			x.topos[s.Topology]++
			x.ops += s.Ops
			x.unknown += s.Unknown
			x.illegal += len(s.Illegal)
			x.lost += len(s.Lost)
			x.divergent += len(s.Divergent)
			if s.Expiry != nil {
				x.probeOps += s.Expiry.Ops
				x.expiryViolations += len(s.Expiry.Violations)
			}
			if len(s.Undecided) > 0 || s.Porcupine == string(porcupine.Unknown) {
				x.undecided++
			}
			if len(s.Vacuous) > 0 {
				x.vacuous++
			}
			if len(s.Failures) > 0 || s.Outcome != OutcomePass {
				x.failed++
			}
		}
	}
	rows["total"] = total
	slices.Sort(topoNames)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n| fault | runs | topologies | ops checked | unknown writes | violating keys | lost-write keys | divergent replicas | expiry probe ops | expiry violations | undecided runs | vacuous runs | failed runs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range slices.Concat(names, topoNames, []string{"total"}) {
		r := rows[n]
		var topos []string
		for _, k := range slices.Sorted(maps.Keys(r.topos)) {
			topos = append(topos, fmt.Sprintf("%s×%d", k, r.topos[k]))
		}
		fmt.Fprintf(&sb, "| %s | %d | %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", n, r.runs, strings.Join(topos, " "), r.ops, r.unknown, r.illegal, r.lost, r.divergent, r.probeOps, r.expiryViolations, r.undecided, r.vacuous, r.failed)
	}
	return sb.String()
}
