package robustness

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	flagSize     = flag.Int("size", envInt("ROBUSTNESS_SIZE", 0), "cluster size for every run (0: 3, or 1 for a quarter of the runs whose fault allows it)")
	flagClients  = flag.Int("clients", envInt("ROBUSTNESS_CLIENTS", 6), "sequential clients per run")
	flagKVDArgs  = flag.String("kvd-args", os.Getenv("ROBUSTNESS_KVD_ARGS"), "extra flags for every kvd serve, space-separated (e.g. --read-consistency=local to see a violation caught)")
)

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
	size  int
}

func plans(t *testing.T) []plan {
	faults := Faults()
	if *flagFaults != "" {
		faults = nil
		for _, name := range strings.Split(*flagFaults, ",") {
			f, err := FaultByName(strings.TrimSpace(name))
			if err != nil {
				t.Fatalf("-faults: %v", err)
			}
			faults = append(faults, f)
		}
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()) % 1_000_000_000
	}
	var out []plan
	for i := range *flagRuns {
		s := seed + uint64(i)
		f := faults[s%uint64(len(faults))]
		rng := rand.New(rand.NewPCG(s, 0x73697a65))
		size := 3
		if *flagSize != 0 {
			size = *flagSize
		} else if fits(f, 1) && rng.IntN(4) == 0 {
			size = 1
		}
		if !fits(f, size) {
			t.Fatalf("fault %s does not apply to %d nodes", f.Name, size)
		}
		out = append(out, plan{seed: s, fault: f, size: size})
	}
	return out
}

func fits(f Fault, size int) bool {
	for _, s := range f.Sizes {
		if s == size {
			return true
		}
	}
	return false
}

// runSummary is one line of the summary file.
type runSummary struct {
	Seed        uint64   `json:"seed"`
	Fault       string   `json:"fault"`
	Nodes       int      `json:"nodes"`
	Ops         int      `json:"ops"`
	Unknown     int      `json:"unknown"`
	FailedReads int      `json:"failed_reads"`
	Porcupine   string   `json:"porcupine"`
	Illegal     []string `json:"illegal_keys,omitempty"`
	Lost        []string `json:"lost_keys,omitempty"`
	Divergent   []string `json:"divergent,omitempty"`
	Failures    []string `json:"failures,omitempty"`
	Artifacts   string   `json:"artifacts,omitempty"`
}

func TestRobustness(t *testing.T) {
	if testing.Short() {
		t.Skip("real clusters under faults; run make robustness")
	}
	root := artifactsRoot(t)
	ps := plans(t)
	var sums []runSummary
	start := time.Now()
	for i, p := range ps {
		name := fmt.Sprintf("%03d-%s-%dn-seed%d", i, p.fault.Name, p.size, p.seed)
		t.Run(name, func(t *testing.T) {
			bin := kvdproc.Binary(t)
			if NeedsFailpoints(p.fault) {
				bin = kvdproc.FailpointBinary(t)
			}
			cfg := Config{
				Binary: bin, Dir: t.TempDir(), Seed: p.seed, Fault: p.fault, Size: p.size,
				Duration: *flagDuration, Clients: *flagClients, Timing: DefaultTiming,
				ExtraArgs: strings.Fields(*flagKVDArgs), CheckTimeout: 60 * time.Second, Logf: t.Logf,
			}
			ctx, cancel := context.WithTimeout(context.Background(), *flagDuration+5*time.Minute)
			defer cancel()
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			s := runSummary{Seed: p.seed, Fault: p.fault.Name, Nodes: p.size, Ops: res.Stats.Ops,
				Unknown: res.Stats.Unknown, FailedReads: res.Stats.FailedReads, Porcupine: string(res.Verdict.Result),
				Illegal: res.Verdict.IllegalKeys, Lost: res.Verdict.LostKeys, Divergent: res.Divergent, Failures: res.Failures}
			t.Logf("%d ops (%d reads, %d writes of which %d unknown; %d failed reads dropped), porcupine %s, applied %d, digests %v",
				res.Stats.Ops, res.Stats.Reads, res.Stats.Writes, res.Stats.Unknown, res.Stats.FailedReads,
				res.Verdict.Result, res.Applied, res.Digests)
			if res.Verdict.Result == porcupine.Unknown {
				t.Logf("porcupine did not finish within %s", cfg.CheckTimeout)
			}
			if res.Failed() {
				out := filepath.Join(root, fmt.Sprintf("%d-%s", p.seed, p.fault.Name))
				repro := fmt.Sprintf("go test ./internal/testing/robustness -run TestRobustness -count=1 -v -args -runs=1 -seed=%d -faults=%s -size=%d -duration=%s -clients=%d",
					p.seed, p.fault.Name, p.size, *flagDuration, *flagClients)
				if *flagKVDArgs != "" {
					repro += fmt.Sprintf(" -kvd-args=%q", *flagKVDArgs)
				}
				if err := SaveArtifacts(out, cfg, res, repro); err != nil {
					t.Errorf("save artifacts: %v", err)
				}
				s.Artifacts = out
				t.Errorf("run failed; artifacts in %s\nreproduce: %s\n  %s", out, repro, strings.Join(res.Failures, "\n  "))
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
		path := filepath.Join(root, fmt.Sprintf("summary-%d-%druns.json", ps[0].seed, len(ps)))
		if err := writeJSON(path, sums); err != nil {
			t.Errorf("summary: %v", err)
		} else {
			t.Logf("summary: %s", path)
		}
	}
}

// logTable prints the per-fault totals the docs' results table is made of.
func logTable(t *testing.T, sums []runSummary, took time.Duration) {
	type row struct{ runs, ops, unknown, illegal, lost, divergent, failed, timeouts int }
	rows := map[string]*row{}
	var names []string
	total := &row{}
	for _, s := range sums {
		r := rows[s.Fault]
		if r == nil {
			r = &row{}
			rows[s.Fault] = r
			names = append(names, s.Fault)
		}
		for _, x := range []*row{r, total} {
			x.runs++
			x.ops += s.Ops
			x.unknown += s.Unknown
			x.illegal += len(s.Illegal)
			x.lost += len(s.Lost)
			x.divergent += len(s.Divergent)
			if len(s.Failures) > 0 {
				x.failed++
			}
			if s.Porcupine == string(porcupine.Unknown) {
				x.timeouts++
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n| fault | runs | ops checked | unknown writes | violating keys | lost-write keys | divergent replicas | failed runs | checker timeouts |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range append(names, "total") {
		r := total
		if n != "total" {
			r = rows[n]
		}
		fmt.Fprintf(&sb, "| %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", n, r.runs, r.ops, r.unknown, r.illegal, r.lost, r.divergent, r.failed, r.timeouts)
	}
	t.Logf("%d runs in %s, %s of traffic each:%s", len(sums), took.Round(time.Second), *flagDuration, sb.String())
}
