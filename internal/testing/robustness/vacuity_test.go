package robustness

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// hardHistory is one key that porcupine cannot decide quickly: n
// concurrent writes of unknown outcome and a read of a value none of them
// wrote, so every order of every subset must be tried before it is found
// illegal.
func hardHistory(n int) []*Op {
	var rows []row
	for i := range n {
		rows = append(rows, row{i, 0, -1, Input{Op: OpSet, Value: string(rune('a' + i))}, Output{}})
	}
	rows = append(rows, row{n, 1, 2, Input{Op: OpGet}, Output{Status: "VALUE", Value: "nobody wrote this"}})
	return append(ops("hard", rows...), ops("easy",
		row{0, 0, 10, Input{Op: OpSet, Value: "x"}, Output{Status: "STORED"}},
		row{1, 11, 12, Input{Op: OpGet}, Output{Status: "VALUE", Value: "x"}})...)
}

// TestUndecidedIsNotAPass: a key porcupine cannot decide within the
// timeout is undecided, the run's verdict says so and the run fails; the
// key it did decide is not reported.
func TestUndecidedIsNotAPass(t *testing.T) {
	const final = 99
	start := time.Now()
	v := checkLinearizable(hardHistory(22), final, time.Millisecond)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the check took %s: the timeout did not stop it", took)
	}
	if v.Result != porcupine.Unknown || len(v.Undecided) != 1 || v.Undecided[0].Key != "hard" ||
		v.Undecided[0].Ops != 23 || v.Undecided[0].Unknown != 22 || len(v.IllegalKeys)+len(v.LostKeys) != 0 {
		t.Fatalf("got %+v, want key hard undecided (23 ops, 22 unknown)", v)
	}
	var res Result
	res.judgeChecker(v, time.Millisecond)
	if !res.Failed() || res.Outcome() != OutcomeUndecided || !strings.Contains(res.Failures[0], "hard (history: 23 ops, 22 unknown)") {
		t.Fatalf("outcome %s, failures %q: an undecided run must fail as undecided", res.Outcome(), res.Failures)
	}
	// A violation elsewhere makes the run failed, whatever is undecided.
	res.fail("not linearizable: …")
	if res.Outcome() != OutcomeFailed {
		t.Errorf("outcome %s with a violation, want failed", res.Outcome())
	}
	// Decided in time, the same key is illegal.
	if v := checkLinearizable(hardHistory(6), final, 10*time.Second); len(v.IllegalKeys) != 1 || v.Result != porcupine.Illegal {
		t.Errorf("small hard history: %+v, want illegal", v)
	}
}

func TestOutcome(t *testing.T) {
	var r Result
	if r.Outcome() != OutcomePass || r.Failed() {
		t.Fatalf("empty result: %s", r.Outcome())
	}
	r.vacuous("no operation issued during the fault")
	if r.Outcome() != OutcomeVacuous || !r.Failed() {
		t.Errorf("vacuous: %s", r.Outcome())
	}
	r.undecided("key k")
	if r.Outcome() != OutcomeUndecided {
		t.Errorf("vacuous and undecided: %s, want undecided", r.Outcome())
	}
}

// attempts builds attempts of client c on node n: (call, return, ok).
func attempts(c int, n string, rows ...[3]int64) []Attempt {
	var out []Attempt
	for _, r := range rows {
		out = append(out, Attempt{Client: c, Node: n, Call: r[0], Return: r[1], OK: r[2] == 1})
	}
	return out
}

func TestPhases(t *testing.T) {
	const final = 9
	w := Window{Inject: 100, Heal: 200}
	var as []Attempt
	as = append(as, attempts(0, "n1", [3]int64{10, 20, 1}, [3]int64{90, 110, 1}, [3]int64{120, 130, 1}, [3]int64{150, 190, 0}, [3]int64{210, 220, 1})...)
	as = append(as, attempts(final, "n1", [3]int64{300, 310, 1}, [3]int64{130, 140, 1})...)
	got := phases(as, w, final)
	// The operation in flight when the fault came counts in no phase.
	if want := (Phases{Before: 1, During: 1, DuringFailed: 1, After: 1}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestVacuity: a run without operations during the fault is vacuous, and
// so is one whose fault had none of its expected effects.
func TestVacuity(t *testing.T) {
	const final = 9
	w := Window{Inject: 100, Heal: 200}
	none := expectation{}
	// Traffic stopped during the fault (every client waiting on something).
	gap := attempts(0, "n1", [3]int64{10, 20, 1}, [3]int64{30, 250, 1}, [3]int64{260, 270, 1})
	got := vacuity(none, phases(gap, w, final), gap, w, final, observed{})
	if len(got) != 1 || !strings.Contains(got[0], "no operation issued during the fault") {
		t.Errorf("no traffic during the fault: %q", got)
	}
	// Only the final client's operations after the heal: still vacuous.
	onlyFinal := append(attempts(0, "n1", [3]int64{10, 20, 1}, [3]int64{120, 130, 1}), attempts(final, "n1", [3]int64{300, 310, 1})...)
	if got := vacuity(none, phases(onlyFinal, w, final), onlyFinal, w, final, observed{}); len(got) != 1 || !strings.Contains(got[0], "after") {
		t.Errorf("no traffic after the heal: %q", got)
	}
	// Failures only during the fault: fine for an outage, not otherwise.
	outage := attempts(0, "n2", [3]int64{10, 20, 1}, [3]int64{120, 130, 0}, [3]int64{260, 270, 1})
	p := phases(outage, w, final)
	if got := vacuity(expectation{outage: true}, p, outage, w, final, observed{}); len(got) != 0 {
		t.Errorf("outage: %q", got)
	}
	if got := vacuity(none, p, outage, w, final, observed{}); len(got) != 1 || !strings.Contains(got[0], "no definite reply during") {
		t.Errorf("no reply with a quorum: %q", got)
	}
	good := attempts(0, "n1", [3]int64{10, 20, 1}, [3]int64{120, 130, 1}, [3]int64{260, 270, 1})
	p = phases(good, w, final)
	all := expectation{effects: []effect{effectElection, effectRestart, effectTargetErrors, effectErrors}}
	got = vacuity(all, p, good, w, final, observed{termBefore: 2, termAfter: 2, leaderBefore: "n1", leaderAfter: "n1",
		target: "n1", killed: []string{"n1"}, startsBefore: map[string]int{"n1": 1}, startsAfter: map[string]int{"n1": 1}})
	for i, want := range []string{"no election", "n1 was not restarted", "no operation sent to n1 failed", "no operation failed"} {
		if i >= len(got) || !strings.Contains(got[i], want) {
			t.Errorf("finding %d: want %q in %q", i, want, got)
		}
	}
	// The same effects, observed.
	good = append(good, attempts(1, "n1", [3]int64{150, 160, 0})...)
	got = vacuity(all, phases(good, w, final), good, w, final, observed{termBefore: 2, termAfter: 3,
		target: "n1", killed: []string{"n1"}, startsBefore: map[string]int{"n1": 1}, startsAfter: map[string]int{"n1": 2}})
	if len(got) != 0 {
		t.Errorf("every effect observed: %q", got)
	}
	// A witness target has no clients to fail.
	if got := vacuity(expectation{effects: []effect{effectTargetErrors}}, p, good, w, final, observed{target: "n3", targetWitness: true}); len(got) != 0 {
		t.Errorf("witness target: %q", got)
	}
}

// TestEveryFaultHasExpectations: adding a fault means deciding what its
// runs must show.
func TestEveryFaultHasExpectations(t *testing.T) {
	for _, f := range Faults() {
		for _, topo := range f.Topologies {
			if _, err := expect(f.Name, topo); err != nil {
				t.Error(err)
			}
		}
	}
	if e, _ := expect("kill-leader", OneNode); e.hasEffect(effectElection) || !e.outage {
		t.Errorf("kill-leader on one node: %+v", e)
	}
	if e, _ := expect("kill-leader", ThreeNodes); !e.hasEffect(effectElection) || e.outage {
		t.Errorf("kill-leader on three nodes: %+v", e)
	}
}
