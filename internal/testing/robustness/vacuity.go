package robustness

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// A run proves nothing if the fault did not happen or traffic did not see
// it: a kill of a node nobody talked to, a partition while every client
// waited on a dial, a pause healed before anyone noticed. So every run must
// show, from what the harness can observe, that it exercised its fault, or
// it fails as vacuous:
//
//   - traffic phases: the traffic clients (not the final reads) got
//     definite replies before the fault window and after it, and issued
//     operations during it; definite replies during it too, unless the
//     fault takes away every quorum for the window (expectation.outage);
//   - the fault's effect, per kind (expectations): an election, a restart,
//     failed operations on the faulted member or on any member. Faults
//     whose heal already fails when they had no effect (network cuts,
//     delays and resets counted by the proxies, a snapshot installed, a
//     leadership transfer, a rejoin, a crash at a failpoint) need nothing
//     more here.

// Window is the fault in history time (ns since the run's start): from
// the call to Inject to the return of heal.
type Window struct {
	Inject, Heal int64
}

// Phases counts the traffic clients' operations around the fault window.
// Before counts definite replies that came before the window opened,
// After definite replies to operations issued after it closed; During
// counts definite replies to operations issued in the window and
// DuringFailed those that failed, were not sent or have an unknown outcome.
type Phases struct {
	Before       int `json:"before"`
	During       int `json:"during"`
	DuringFailed int `json:"during_failed"`
	After        int `json:"after"`
}

func (p Phases) String() string {
	return fmt.Sprintf("%d before, %d during (+%d failed), %d after", p.Before, p.During, p.DuringFailed, p.After)
}

// phases counts attempts of every client but finalClient.
func phases(attempts []Attempt, w Window, finalClient int) Phases {
	var p Phases
	for _, a := range attempts {
		switch {
		case a.Client == finalClient:
		case a.Call >= w.Inject && a.Call <= w.Heal && a.OK:
			p.During++
		case a.Call >= w.Inject && a.Call <= w.Heal:
			p.DuringFailed++
		case !a.OK:
		case a.Return < w.Inject:
			p.Before++
		case a.Call > w.Heal:
			p.After++
		}
	}
	return p
}

// effect is something a fault visibly does.
type effect string

const (
	// effectElection: a leader in a later term than the one the fault
	// was injected under, by the time it healed (polled briefly after).
	effectElection effect = "election"
	// effectRestart: every member the fault killed has a new start line
	// in its log by the time it healed.
	effectRestart effect = "restart"
	// effectTargetErrors: operations sent to the faulted member during
	// the window failed (refused dials, timeouts, SERVER_ERROR). Not
	// checked when the member is a witness: no client talks to one.
	effectTargetErrors effect = "errors on the faulted member"
	// effectErrors: some operation failed during the window, whatever
	// member it went to (a single node or every node down).
	effectErrors effect = "errors"
	// effectLogged: the target's log has every line the fault named
	// (Env.Marks): a failpoint armed, a clock offset taken.
	effectLogged effect = "logged by the target"
	// effectExpiryProbed: the expiry probe judged reads before and after
	// an expiry, and at least one on the faulted member during the
	// window (where its fault could show).
	effectExpiryProbed effect = "expiry probed"
)

// expectation is what a run of one fault kind on one topology must show.
type expectation struct {
	effects []effect
	// outage: the fault leaves no quorum of data members for much of
	// the window, so definite replies during it are not required (only
	// operations issued).
	outage bool
}

// byHeal: the fault's heal fails when the fault had no effect; the
// traffic phases are still checked.
var byHeal = func(Topology) expectation { return expectation{} }

// expectations is, per fault kind, what its runs must show. Every
// registered fault has an entry (TestEveryFaultHasExpectations).
var expectations = map[string]func(Topology) expectation{
	// A single node killed or paused cannot be replaced: its clients
	// fail until it is back. With more members, the others elect.
	"kill-leader": func(t Topology) expectation {
		if t.Data == 1 && t.Witnesses == 0 {
			return expectation{effects: []effect{effectRestart, effectErrors}, outage: true}
		}
		return expectation{effects: []effect{effectElection, effectRestart}}
	},
	"kill-follower": func(Topology) expectation {
		return expectation{effects: []effect{effectRestart, effectTargetErrors}}
	},
	"kill-all": func(Topology) expectation {
		return expectation{effects: []effect{effectRestart, effectErrors}, outage: true}
	},
	"pause-leader": pauseExpectation,
	// CheckQuorum and PreVote are on: a leader that cannot hear a quorum
	// steps down, followers that stop hearing it elect another, and one
	// that cannot receive votes cannot win; an isolated follower cannot
	// disrupt (its heal counts the cut connections).
	"partition-leader":    func(Topology) expectation { return expectation{effects: []effect{effectElection}} },
	"cut-leader-outbound": func(Topology) expectation { return expectation{effects: []effect{effectElection}} },
	"cut-leader-inbound":  func(Topology) expectation { return expectation{effects: []effect{effectElection}} },
	"partition-follower": func(Topology) expectation {
		return expectation{effects: []effect{effectTargetErrors}}
	},
	// Delays stay below the election timeout by design and resets are
	// redialled at once: clients need see nothing; heal fails if no
	// chunk was delayed, no connection reset.
	"delay-peers": byHeal,
	"reset-peers": byHeal,
	// Heal fails unless a snapshot was installed, leadership moved, the
	// replaced member rejoined as a voter.
	"snapshot-follower": byHeal,
	"transfer-leader":   byHeal,
	"replace-follower":  byHeal,
	// As pause-leader; the checker proves no stale lease read.
	"pause-leader-lease": pauseExpectation,
	// The skewed member started with its clock file (its log says at
	// which offset), and the probe judged expiry on it while skewed;
	// heal fails unless it took offset 0 again.
	"clock-skew": func(Topology) expectation {
		return expectation{effects: []effect{effectLogged, effectExpiryProbed}}
	},
	// The slowed member armed its sleep (its log says so); traffic
	// during the window is the generic check. Heal fails if it exited.
	"slow-disk": func(Topology) expectation { return expectation{effects: []effect{effectLogged}} },
}

func init() {
	// Every failpoint crash: heal fails unless the armed member exited at
	// its failpoint (its log says so). A leader crash on one node is an
	// outage until heal restarts it.
	for _, c := range failpointCrashes {
		expectations[c.name] = func(t Topology) expectation {
			return expectation{outage: c.leader && t.Data == 1 && t.Witnesses == 0}
		}
	}
}

// pauseExpectation: a paused single node cannot be replaced, its clients
// fail until it is back; with more members, the others elect.
func pauseExpectation(t Topology) expectation {
	if t.Data == 1 && t.Witnesses == 0 {
		return expectation{effects: []effect{effectErrors}, outage: true}
	}
	return expectation{effects: []effect{effectElection}}
}

// expect returns the expectation of fault on topo.
func expect(fault string, topo Topology) (expectation, error) {
	f, ok := expectations[fault]
	if !ok {
		return expectation{}, fmt.Errorf("fault %s has no vacuity expectation (vacuity.go)", fault)
	}
	return f(topo), nil
}

// observed is what the run saw of the fault's effect.
type observed struct {
	// Term and leader when the fault was injected, and the highest term
	// of a leader at heal (0: no leader seen).
	termBefore, termAfter     uint64
	leaderBefore, leaderAfter string
	// Target is the member the fault acted on ("" for all or none),
	// and whether it is a witness.
	target        string
	targetWitness bool
	// killed are the members whose log must show a new start; starts
	// counts each one's start lines at inject and at heal.
	killed                    []string
	startsBefore, startsAfter map[string]int
	// marks are the lines the fault said its target logs, missing those
	// of them not in the target's log at heal.
	marks, missing []string
	// expiry is the probe's judgement (nil: no probe ran).
	expiry *ExpiryResult
}

// vacuity lists why a run did not exercise its fault; empty means it did.
func vacuity(exp expectation, p Phases, attempts []Attempt, w Window, finalClient int, obs observed) []string {
	var out []string
	if p.Before == 0 {
		out = append(out, "no definite reply before the fault")
	}
	if p.During+p.DuringFailed == 0 {
		out = append(out, "no operation issued during the fault")
	} else if p.During == 0 && !exp.outage {
		out = append(out, "no definite reply during the fault, which leaves a quorum")
	}
	if p.After == 0 {
		out = append(out, "no definite reply after the fault healed")
	}
	failedOn := func(node string) int {
		n := 0
		for _, a := range attempts {
			if a.Client != finalClient && !a.OK && a.Call >= w.Inject && a.Call <= w.Heal && (node == "" || a.Node == node) {
				n++
			}
		}
		return n
	}
	for _, e := range exp.effects {
		switch e {
		case effectElection:
			if obs.termAfter <= obs.termBefore {
				out = append(out, fmt.Sprintf("no election: leader %s in term %d when injected, %q in term %d at heal",
					obs.leaderBefore, obs.termBefore, obs.leaderAfter, obs.termAfter))
			}
		case effectRestart:
			if len(obs.killed) == 0 {
				out = append(out, "no member was killed")
			}
			for _, n := range obs.killed {
				if obs.startsAfter[n] <= obs.startsBefore[n] {
					out = append(out, fmt.Sprintf("%s was not restarted (%d start lines in its log at inject, %d at heal)",
						n, obs.startsBefore[n], obs.startsAfter[n]))
				}
			}
		case effectTargetErrors:
			switch {
			case obs.target == "":
				out = append(out, "the fault named no target")
			case obs.targetWitness:
				// No client talks to a witness; heal's own check stands.
			case failedOn(obs.target) == 0:
				out = append(out, fmt.Sprintf("no operation sent to %s failed during the fault", obs.target))
			}
		case effectErrors:
			if failedOn("") == 0 {
				out = append(out, "no operation failed during the fault")
			}
		case effectLogged:
			if len(obs.marks) == 0 {
				out = append(out, "the fault named no line its target logs")
			}
			for _, m := range obs.missing {
				out = append(out, fmt.Sprintf("%s never logged %q", obs.target, strings.TrimSpace(m)))
			}
		case effectExpiryProbed:
			switch x := obs.expiry; {
			case x == nil:
				out = append(out, "no expiry probe ran")
			case x.Before == 0 || x.After == 0:
				out = append(out, fmt.Sprintf("the expiry probe judged %d reads before an expiry and %d after: want both", x.Before, x.After))
			case x.judgedOn(obs.target, w) == 0:
				out = append(out, fmt.Sprintf("the expiry probe judged no read on %s during the fault", obs.target))
			}
		}
	}
	return out
}

// startLines counts the harness's start lines in each node's log: one per
// launch (cluster.go's launch writes it).
func startLines(nodes []*Node) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		b, err := os.ReadFile(n.LogPath)
		if err == nil {
			out[n.Name] = strings.Count(string(b), "==== robustness: start")
		}
	}
	return out
}

// hasEffect reports whether exp includes e.
func (exp expectation) hasEffect(e effect) bool { return slices.Contains(exp.effects, e) }
