package robustness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Config is one run.
type Config struct {
	// Binary is the kvd executable.
	Binary string
	// Dir holds the nodes' data and logs; the caller removes it.
	Dir string
	// Seed drives every random choice of the run (workload, fault target,
	// fault parameters); with the same seed and fault a run repeats the
	// same schedule, though not the same interleaving.
	Seed uint64
	// Fault is injected once, a quarter into Duration, and healed at three
	// quarters (but never held for less than three election timeouts).
	Fault Fault
	// Topology is the cluster's shape: 1 or 3 data members, or 2 and a
	// witness.
	Topology Topology
	// Duration is how long clients send traffic at least; they go on
	// until they have had definite replies for a quarter of Duration
	// after the heal (at most 30s more).
	Duration time.Duration
	// Clients is the number of sequential clients; the first ones are
	// pinned to one data member each, the rest pick a data member per
	// operation. No client ever sends a witness a request.
	Clients int
	Timing  Timing
	// ExtraArgs go to every `kvd serve`, e.g. a weaker --read-consistency
	// to see the harness catch stale reads.
	ExtraArgs []string
	// Secure runs the cluster with TLS, peer mTLS and authentication,
	// certificates made under Dir/pki (Security).
	Secure bool
	// CheckTimeout bounds porcupine on each key; a key not decided by
	// then fails the run as undecided.
	CheckTimeout time.Duration
	Logf         func(format string, args ...any)
}

// kvdArgs are the extra `kvd serve` flags of the run: the fault's own, then
// ExtraArgs, so that an explicit flag wins over the fault's default.
func (cfg Config) kvdArgs() []string {
	return slices.Concat(cfg.Fault.Args, cfg.ExtraArgs)
}

// Result is what a run found. Failures is empty when every check passed;
// it includes the reasons in Undecided and Vacuous.
type Result struct {
	Fault     string
	Topology  Topology
	Seed      uint64
	Stats     Stats
	Verdict   Verdict
	Applied   uint64
	Digests   map[string]string
	Divergent []string // data members whose digest differs from the first one's
	Failures  []string
	// Undecided: the checker could not decide the run (porcupine timed
	// out on a key). Vacuous: the run did not show that it exercised its
	// fault (vacuity.go). Both fail the run.
	Undecided []string
	Vacuous   []string
	// Window is the fault's span, Phases the traffic around it.
	Window Window
	Phases Phases
	// Expiry is the expiry probe's result (nil: the fault runs none);
	// its violations are failures.
	Expiry   *ExpiryResult
	History  []*Op
	Replicas []Replica
}

// Failed reports whether any check failed.
func (r *Result) Failed() bool { return len(r.Failures) > 0 }

// Run outcomes: only a pass passes.
const (
	OutcomePass      = "pass"
	OutcomeFailed    = "failed"    // a property or the harness failed
	OutcomeUndecided = "undecided" // nothing else failed, but the checker did not decide
	OutcomeVacuous   = "vacuous"   // decided and clean, but the fault was not shown to happen
)

// Outcome is the run's verdict: failed if any check other than the
// checker's decision and the vacuity check failed, else undecided, else
// vacuous, else pass.
func (r *Result) Outcome() string {
	switch {
	case len(r.Failures) > len(r.Undecided)+len(r.Vacuous):
		return OutcomeFailed
	case len(r.Undecided) > 0:
		return OutcomeUndecided
	case len(r.Vacuous) > 0:
		return OutcomeVacuous
	}
	return OutcomePass
}

func (r *Result) undecided(format string, args ...any) {
	r.Undecided = append(r.Undecided, fmt.Sprintf(format, args...))
	r.fail("undecided: "+format, args...)
}

func (r *Result) vacuous(format string, args ...any) {
	r.Vacuous = append(r.Vacuous, fmt.Sprintf(format, args...))
	r.fail("vacuous run: "+format, args...)
}

// judgeChecker turns the checker's verdict into failures: a violation or a
// lost write fails the run, an undecided key too, as undecided.
func (r *Result) judgeChecker(v Verdict, timeout time.Duration) {
	r.Verdict = v
	if len(v.IllegalKeys)+len(v.LostKeys) > 0 {
		r.fail("not linearizable: keys %v violated during traffic, keys %v lost acknowledged writes after healing",
			v.IllegalKeys, v.LostKeys)
	}
	for _, u := range v.Undecided {
		r.undecided("porcupine did not decide key %s within %s", u, timeout)
	}
}

func (r *Result) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// clientTimeouts: some shorter than the server's request timeout (the
// client gives up first, outcome unknown), some longer (the server answers
// SERVER_ERROR first).
var clientTimeouts = []time.Duration{300 * time.Millisecond, 1 * time.Second, 4 * time.Second}

// Run performs one run. It returns an error only when the harness itself
// could not do its job (a node would not start); property violations are
// in Result.Failures.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	res := &Result{Fault: cfg.Fault.Name, Topology: cfg.Topology, Seed: cfg.Seed, Digests: map[string]string{}}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6b7664))
	var sec *Security
	if cfg.Secure {
		var err error
		if sec, err = NewSecurity(filepath.Join(cfg.Dir, "pki"), cfg.Topology.Names()); err != nil {
			return nil, err
		}
	}
	cl, err := StartCluster(ctx, cfg.Binary, cfg.Dir, cfg.Topology, cfg.Timing, sec, cfg.kvdArgs()...)
	if err != nil {
		return nil, fmt.Errorf("start a %s cluster: %w", cfg.Topology, err)
	}
	defer cl.Close()
	for _, r := range cl.StartRetries {
		cfg.Logf("cluster start retried after: %s", r)
	}
	if err := cl.WaitClusterVersion(ctx, 30*time.Second); err != nil {
		res.fail("before traffic: %v", err)
	}
	h := newHistory()

	// Traffic: until Duration has passed and the fault has healed, and
	// then until the traffic clients have had definite replies after
	// the heal for a quarter of Duration (at most 30s: a cluster that
	// does not recover fails the final write anyway).
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	data := cl.DataNodes()
	for i := range cfg.Clients {
		var pinned *Node
		if i < len(data) {
			pinned = data[i]
		}
		// Drawn, not fixed by position: the client pinned to the
		// faulted node must sometimes be patient enough for its request
		// to outlive a pause.
		c := newClient(i, pinned, data, clientTimeouts[rng.IntN(len(clientTimeouts))], rng.Uint64(), h)
		wg.Add(1)
		go func() { defer wg.Done(); c.run(tctx) }()
	}

	// The expiry probe, on its own keys, for the faults that want it.
	var probeOps []probeOp
	probeDone := make(chan struct{})
	if cfg.Fault.ExpiryProbe {
		seed := rng.Uint64()
		go func() { defer close(probeDone); probeOps = runExpiryProbe(tctx, data, h.now, seed) }()
	} else {
		close(probeDone)
	}

	// The fault: inject, hold, heal — heal runs even if traffic ended.
	hold := max(cfg.Duration/2, 3*cfg.Timing.ElectionTimeout)
	env := &Env{Cluster: cl, Rng: rand.New(rand.NewPCG(rng.Uint64(), 1)), Logf: func(f string, a ...any) {
		cfg.Logf("[%6.2fs] %s", time.Duration(h.now()).Seconds(), fmt.Sprintf(f, a...))
	}}
	exp, err := expect(cfg.Fault.Name, cfg.Topology)
	if err != nil {
		return nil, err
	}
	var obs observed
	faultErr := func() error {
		// A quarter into Duration, once traffic has had a definite
		// reply (or 10s more have passed: the vacuity check says so).
		_ = poll(ctx, cfg.Duration/4+10*time.Second, "a definite reply before the fault", func() (bool, error) {
			return time.Duration(h.now()) >= cfg.Duration/4 && h.okSince(0, cfg.Clients) > 0, nil
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if lead, term := cl.leaderTerm(ctx); lead != nil {
			obs.leaderBefore, obs.termBefore = lead.Name, term
		}
		obs.startsBefore = startLines(cl.Nodes)
		res.Window.Inject = h.now()
		healFn, err := cfg.Fault.Inject(ctx, env)
		if err != nil {
			res.Window.Heal = h.now()
			return fmt.Errorf("inject %s: %w", cfg.Fault.Name, err)
		}
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		err = healFn(ctx)
		res.Window.Heal = h.now()
		if err != nil {
			return fmt.Errorf("heal %s: %w", cfg.Fault.Name, err)
		}
		return nil
	}()
	obs.startsAfter = startLines(cl.Nodes)
	if env.Target != nil {
		obs.target, obs.targetWitness = env.Target.Name, env.Target.Witness
	}
	for _, n := range env.Killed {
		obs.killed = append(obs.killed, n.Name)
	}
	if exp.hasEffect(effectElection) {
		// The new leader shows up within a few election timeouts of the
		// heal at the latest.
		_ = poll(ctx, 10*time.Second, "a leader in a later term", func() (bool, error) {
			if lead, term := cl.leaderTerm(ctx); lead != nil {
				obs.leaderAfter, obs.termAfter = lead.Name, term
			}
			return obs.termAfter > obs.termBefore, nil
		})
	}
	_ = poll(ctx, 30*time.Second, "definite replies after the heal", func() (bool, error) {
		return time.Duration(h.now()) >= cfg.Duration &&
			time.Duration(h.now()-res.Window.Heal) >= cfg.Duration/4 &&
			h.okSince(res.Window.Heal+1, cfg.Clients) > 0, nil
	})
	stop()
	wg.Wait()
	<-probeDone
	if env.Target != nil && len(env.Marks) > 0 {
		obs.marks = env.Marks
		log := lastLaunchesSince(env.Target.LogPath, obs.startsBefore[env.Target.Name])
		for _, m := range env.Marks {
			if !strings.Contains(log, m) {
				obs.missing = append(obs.missing, m)
			}
		}
	}
	if cfg.Fault.ExpiryProbe {
		x := judgeExpiry(probeOps, expiryTolerance, env.ClockAhead)
		res.Expiry, obs.expiry = &x, &x
		cfg.Logf("expiry probe: %d ops, %d reads judged before expiry, %d after, %d violations (allowance for a clock ahead: %s)",
			x.Ops, x.Before, x.After, len(x.Violations), env.ClockAhead)
		for _, v := range x.Violations {
			res.fail("expiry: %s", v)
		}
	}
	if faultErr != nil {
		res.fail("fault: %v", faultErr)
	}

	// Recovery: every node ready (witnesses too), then a write that must
	// succeed.
	if err := cl.WaitReady(ctx, cl.Nodes...); err != nil {
		res.fail("after healing: %v", err)
	}
	final := newClient(cfg.Clients, nil, data, 4*time.Second, rng.Uint64(), h)
	defer final.close()
	if _, err := final.mustSucceed(ctx, data, finalKey, Input{Op: OpSet, Value: "final"}, 30*time.Second); err != nil {
		res.fail("final write: %v", err)
	}
	// Every key on every data member, through linearizable reads that
	// join the checked history: an acknowledged write that is gone shows
	// up here.
	for _, n := range data {
		for _, k := range AllKeys() {
			if _, err := final.mustSucceed(ctx, []*Node{n}, k, Input{Op: OpGets}, 15*time.Second); err != nil {
				// One node that cannot serve reads is one failure, not
				// one per key at 15s each.
				res.fail("final read on %s: %v", n.Name, err)
				break
			}
		}
	}

	// The probe's items must all be past their expiry (by a margin) before
	// the replicas are compared: one expiring between two members' reads
	// would differ for no fault of theirs.
	if res.Expiry != nil {
		if d := time.Duration(res.Expiry.lastExpiry - h.now()); d > -time.Second {
			select {
			case <-time.After(d + time.Second):
			case <-ctx.Done():
			}
		}
	}

	// Convergence: every member (witnesses too: they apply the same log,
	// keeping only its member and cluster-version commands) at the same
	// applied index, then the data members' states compared.
	applied, err := cl.WaitApplied(ctx, 30*time.Second)
	res.Applied = applied
	if err != nil {
		res.fail("replicas: %v", err)
	} else {
		for _, n := range data {
			r, err := cl.LocalState(ctx, n)
			if err != nil {
				res.fail("state of %s: %v", n.Name, err)
				continue
			}
			res.Replicas = append(res.Replicas, r)
			res.Digests[n.Name] = r.Digest
			if r.Digest != res.Replicas[0].Digest {
				res.Divergent = append(res.Divergent, n.Name)
			}
		}
		if len(res.Divergent) > 0 {
			res.fail("replicas diverge at applied index %d: digests %v", applied, res.Digests)
		}
	}

	// Linearizability.
	res.History = h.Ops()
	res.Stats = h.Stats()
	if res.Stats.Protocol > 0 {
		res.fail("%d replies no memcached would send, first: %s", res.Stats.Protocol, strings.Join(h.ProtocolErrors(), "; "))
	}
	for _, p := range trafficVacuity(res.History, cfg.Clients) {
		res.vacuous("%s (%+v)", p, res.Stats)
	}
	attempts := h.Attempts()
	res.Phases = phases(attempts, res.Window, cfg.Clients)
	for _, p := range vacuity(exp, res.Phases, attempts, res.Window, cfg.Clients, obs) {
		res.vacuous("%s: %s (operations: %s)", cfg.Fault.Name, p, res.Phases)
	}
	res.judgeChecker(checkLinearizable(res.History, cfg.Clients, cfg.CheckTimeout), cfg.CheckTimeout)
	for _, n := range cl.Nodes {
		if b, err := os.ReadFile(n.LogPath); err == nil && strings.Contains(string(b), "WARNING: DATA RACE") {
			res.fail("%s hit a data race (see its log)", n.Name)
		}
	}
	for _, f := range checkWitnesses(ctx, cl, cfg.Logf) {
		res.fail("%s", f)
	}
	return res, nil
}

// SaveArtifacts writes the history, porcupine's visualisation, the
// replicas' states, the node logs and a summary under out.
func SaveArtifacts(out string, cfg Config, res *Result, repro string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("artifacts dir: %w", err)
	}
	var errs []error
	errs = append(errs, writeJSON(filepath.Join(out, "history.json"), res.History))
	errs = append(errs, writeJSON(filepath.Join(out, "replicas.json"), res.Replicas))
	// The keys the checker decided, checked again for the drawing (an
	// undecided key would only time out again).
	decided, info := porcupine.CheckOperationsVerbose(Model.ToModel(), porcupineOps(decidedOps(res.History, res.Verdict)), cfg.CheckTimeout)
	if decided != porcupine.Unknown {
		if err := porcupine.VisualizePath(Model.ToModel(), info, filepath.Join(out, "linearizability.html")); err != nil {
			errs = append(errs, fmt.Errorf("visualise: %w", err))
		}
	}
	entries, err := os.ReadDir(cfg.Dir)
	if err != nil {
		errs = append(errs, fmt.Errorf("list node logs: %w", err))
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			errs = append(errs, copyFile(filepath.Join(cfg.Dir, e.Name()), filepath.Join(out, e.Name())))
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "fault: %s\ntopology: %s\nseed: %d\nduration: %s\nclients: %d\nkvd flags: %v\n", res.Fault, res.Topology, res.Seed, cfg.Duration, cfg.Clients, cfg.kvdArgs())
	fmt.Fprintf(&sb, "outcome: %s\nops: %+v\nphases: %s (fault window %.2fs–%.2fs)\nporcupine: %s\napplied: %d\ndigests: %v\n\nfailures:\n",
		res.Outcome(), res.Stats, res.Phases, time.Duration(res.Window.Inject).Seconds(), time.Duration(res.Window.Heal).Seconds(),
		res.Verdict.Result, res.Applied, res.Digests)
	for _, f := range res.Failures {
		fmt.Fprintf(&sb, "  - %s\n", f)
	}
	fmt.Fprintf(&sb, "\nreproduce:\n  %s\n", repro)
	errs = append(errs, os.WriteFile(filepath.Join(out, "summary.txt"), []byte(sb.String()), 0o644))
	return errors.Join(errs...)
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return fmt.Errorf("copy %s: %w", from, err)
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	return nil
}
