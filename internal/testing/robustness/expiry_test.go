package robustness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// TestJudgeExpiry: with set call S0 = 1000ms, return S1 = 1100ms and a
// 2s lifetime, the expiry lies in [3000ms, 3100ms]; with a 250ms
// tolerance a hit is judged from a call after 3350ms and a miss from a
// return before 2750ms.
func TestJudgeExpiry(t *testing.T) {
	set := probeOp{Key: "k", Node: "n1", Set: true, TTL: 2 * time.Second, Call: 1000 * ms, Return: 1100 * ms, OK: true}
	get := func(call, ret int64, hit bool) probeOp {
		return probeOp{Key: "k", Node: "n2", Call: call * ms, Return: ret * ms, OK: true, Hit: hit}
	}
	tests := []struct {
		name          string
		set           probeOp
		read          probeOp
		ahead         time.Duration
		before, after int
		violation     string
	}{
		{name: "hit in its life", set: set, read: get(1200, 1300, true), before: 1},
		{name: "miss in its life", set: set, read: get(1200, 1300, false), before: 1, violation: "hidden by n2 before its expiry"},
		{name: "miss ending just inside the tolerance", set: set, read: get(2700, 2751, false)},
		{name: "miss ending just before the tolerance", set: set, read: get(2700, 2749, false), before: 1, violation: "hidden"},
		{name: "hit near the expiry is not judged", set: set, read: get(3300, 3400, true)},
		{name: "hit called just past the tolerance", set: set, read: get(3351, 3400, true), after: 1, violation: "served by n2 after its expiry"},
		{name: "miss after expiry", set: set, read: get(3351, 3400, false), after: 1},
		{name: "a slow read that began in time is not judged", set: set, read: get(3349, 5000, true)},
		{name: "read concurrent with the set", set: set, read: get(1050, 1300, false)},
		{name: "set not acknowledged", set: probeOp{Key: "k", Set: true, TTL: 2 * time.Second, Call: 1000 * ms, Return: 2000 * ms}, read: get(2100, 2200, false)},
		{name: "failed read", set: set, read: probeOp{Key: "k", Node: "n2", Call: 1200 * ms, Return: 1300 * ms}},
		{name: "a clock ahead that led excuses an early miss", set: set, read: get(2000, 2100, false), ahead: 5 * time.Second},
		{name: "a clock ahead does not excuse a late hit", set: set, read: get(4000, 4100, true), ahead: 5 * time.Second, after: 1, violation: "after its expiry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judgeExpiry([]probeOp{tt.set, tt.read}, 250*time.Millisecond, tt.ahead)
			if got.Ops != 2 || got.Before != tt.before || got.After != tt.after {
				t.Errorf("ops %d, judged %d before and %d after; want 2, %d, %d", got.Ops, got.Before, got.After, tt.before, tt.after)
			}
			switch {
			case tt.violation == "" && len(got.Violations) > 0:
				t.Errorf("violations %q, want none", got.Violations)
			case tt.violation != "" && (len(got.Violations) != 1 || !strings.Contains(got.Violations[0], tt.violation)):
				t.Errorf("violations %q, want one with %q", got.Violations, tt.violation)
			}
		})
	}
}

func TestJudgeExpiryKeysApart(t *testing.T) {
	ops := []probeOp{
		{Key: "a", Set: true, TTL: time.Second, Call: 0, Return: 10 * ms, OK: true},
		{Key: "b", Set: true, TTL: 3 * time.Second, Call: 0, Return: 10 * ms, OK: true},
		{Key: "a", Node: "n1", Call: 2000 * ms, Return: 2010 * ms, OK: true},            // a expired, missing: fine
		{Key: "b", Node: "n1", Call: 2000 * ms, Return: 2010 * ms, OK: true, Hit: true}, // b live: fine
		{Key: "a", Set: true, TTL: time.Second, Call: 3000 * ms, Return: 3010 * ms, OK: true},
	}
	got := judgeExpiry(ops, 250*time.Millisecond, 0)
	if got.Before != 1 || got.After != 1 || len(got.Violations) != 1 || !strings.Contains(got.Violations[0], "set twice") {
		t.Errorf("got %+v", got)
	}
	if got.lastExpiry != 3010*ms+int64(time.Second) {
		t.Errorf("last expiry %d", got.lastExpiry)
	}
	if n := got.judgedOn("n1", Window{Inject: 1000 * ms, Heal: 2500 * ms}); n != 2 {
		t.Errorf("judged on n1 in the window: %d, want 2", n)
	}
	if n := got.judgedOn("n1", Window{Inject: 0, Heal: 1000 * ms}); n != 0 {
		t.Errorf("judged on n1 before the window: %d, want 0", n)
	}
}

// TestClockAndDiskEffects: clock-skew is vacuous unless its target logged
// the offset and the probe judged reads both ways, one on the target
// during the window; slow-disk unless the target logged the armed sleep.
func TestClockAndDiskEffects(t *testing.T) {
	const final = 9
	w := Window{Inject: 100, Heal: 200}
	good := attempts(0, "n1", [3]int64{10, 20, 1}, [3]int64{120, 130, 1}, [3]int64{260, 270, 1})
	p := phases(good, w, final)
	clock, _ := expect("clock-skew", ThreeNodes)
	probed := &ExpiryResult{Before: 1, After: 1, judged: []judgedRead{{node: "n2", call: 150}}}
	ok := observed{target: "n2", marks: []string{"failpoint clock: offset -7s"}, expiry: probed}
	if got := vacuity(clock, p, good, w, final, ok); len(got) != 0 {
		t.Errorf("clock-skew with its effects: %q", got)
	}
	tests := []struct {
		name string
		obs  observed
		want string
	}{
		{"offset never logged", observed{target: "n2", marks: ok.marks, missing: ok.marks, expiry: probed}, `n2 never logged "failpoint clock: offset -7s"`},
		{"no probe", observed{target: "n2", marks: ok.marks}, "no expiry probe ran"},
		{"nothing judged after an expiry", observed{target: "n2", marks: ok.marks, expiry: &ExpiryResult{Before: 3}}, "3 reads before an expiry and 0 after"},
		{"nothing judged on the target", observed{target: "n3", marks: ok.marks, expiry: probed}, "no read on n3 during the fault"},
	}
	for _, tt := range tests {
		if got := vacuity(clock, p, good, w, final, tt.obs); len(got) != 1 || !strings.Contains(got[0], tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	disk, _ := expect("slow-disk", OneNode)
	if got := vacuity(disk, p, good, w, final, observed{target: "n1"}); len(got) != 1 || !strings.Contains(got[0], "named no line") {
		t.Errorf("slow-disk with no mark: %q", got)
	}
	if e, _ := expect("pause-leader-lease", ThreeNodes); !e.hasEffect(effectElection) {
		t.Errorf("pause-leader-lease on 3n: %+v", e)
	}
}

// TestPauseOutlastsTheLease: pause-leader-lease proves something only if
// the leader is stopped for longer than its read lease. The lease is
// (ElectionTicks-2) ticks less a tenth (internal/replica/lease.go
// leaseDuration; a tick is the heartbeat interval); the shortest hold is
// three election timeouts.
func TestPauseOutlastsTheLease(t *testing.T) {
	tm := DefaultTiming
	ticks := int64(tm.ElectionTimeout / tm.Heartbeat)
	lease := time.Duration(ticks-2) * tm.Heartbeat * 9 / 10
	if hold := 3 * tm.ElectionTimeout; hold <= 2*lease {
		t.Errorf("the shortest hold %s does not outlast the lease %s twice over", hold, lease)
	}
	f, err := FaultByName("pause-leader-lease")
	if err != nil || !slices.Equal(f.Args, []string{"--read-consistency", "lease"}) {
		t.Errorf("pause-leader-lease: %v, args %q", err, f.Args)
	}
	for _, name := range []string{"clock-skew", "slow-disk"} {
		if f, err := FaultByName(name); err != nil || !NeedsFailpoints(f) {
			t.Errorf("%s: %v, needs failpoints %v", name, err, NeedsFailpoints(f))
		}
	}
	if f, _ := FaultByName("pause-leader-lease"); NeedsFailpoints(f) {
		t.Error("pause-leader-lease needs no failpoint build")
	}
}

func TestLastLaunchesSince(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n1.log")
	log := "\n==== robustness: start n1 a ====\none\n\n==== robustness: start n1 b ====\ntwo\n\n==== robustness: start n1 c ====\nthree\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	for starts, want := range map[int][]string{0: {"one", "two", "three"}, 1: {"two", "three"}, 2: {"three"}, 3: nil} {
		got := lastLaunchesSince(path, starts)
		for _, w := range []string{"one", "two", "three"} {
			if strings.Contains(got, w) != slices.Contains(want, w) {
				t.Errorf("since %d starts: %q, want %v", starts, got, want)
			}
		}
	}
	if !ledIn("x\ntime=x level=INFO msg=\"leader changed\" component=replica from=0 to=12 term=2\n", 12) || ledIn("msg=\"leader changed\" from=12 to=1 term=3", 12) {
		t.Error("ledIn")
	}
}
