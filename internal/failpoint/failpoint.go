// Package failpoint owns kvd's named failpoints: the places at the
// durability boundaries (the raft log's fsync, the state machine's apply,
// snapshot shipping and installation) where a test can make a real kvd
// process crash or stall, and the KVD_FAILPOINTS syntax that arms them.
//
// A boundary calls Hit with one of the names below. In a normal build Hit
// is an empty function that the compiler inlines away, so the production
// binary pays nothing. Built with the tag `failpoints`
// (go build -tags failpoints ./cmd/kvd), the process reads KVD_FAILPOINTS
// at start-up and arms what it names; a spec that does not parse stops the
// process before main runs, with the parse error on stderr.
//
// # Syntax
//
//	KVD_FAILPOINTS = point { ";" point }
//	point          = name "=" action [ "@" count ]
//	action         = "crash" | "sleep(" duration ")"
//
// crash kills the process with SIGKILL, as a power cut of the process
// would: no deferred code runs, nothing is flushed. It happens on the
// count-th hit (the first without @). sleep(200ms) stalls the hitting
// goroutine on every hit, or only on the count-th one. Names are checked:
// a misspelt one is an error, not a failpoint that never fires.
//
// With KVD_FAILPOINTS_ARM=usr1 the failpoints count no hits until the
// process receives SIGUSR1, so that a harness can restart a node armed and
// fire it only once the node has the role it wants (say, after a
// leadership transfer).
//
// # Clock
//
// With KVD_CLOCK_OFFSET_FILE=PATH the wall clock the node reads through
// Now (the clock it stamps the log with and falls back on; see package
// clusterclock) is shifted by the duration PATH holds ("5s", "-3s"; empty
// or missing: none), re-read every 50ms: a harness skews one member's
// clock, or makes it jump, by writing the file. Monotonic time, which
// measures timeouts, is not shifted, as a real clock step does not shift
// it either.
package failpoint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EnvVar names the failpoints to arm; ArmEnvVar delays them (see the
// package documentation).
const (
	EnvVar    = "KVD_FAILPOINTS"
	ArmEnvVar = "KVD_FAILPOINTS_ARM"
	// ClockEnvVar names the file of the wall clock's offset.
	ClockEnvVar = "KVD_CLOCK_OFFSET_FILE"
	// ArmOnUSR1 is the one value ArmEnvVar takes.
	ArmOnUSR1 = "usr1"
)

// The failpoints. Each sits where a crash tests one durability promise.
const (
	// RaftlogBeforeSync: raftlog.Save built its batch of entries and
	// HardState and is about to commit it with fsync. A crash loses the
	// batch; nothing was acknowledged on its strength yet.
	RaftlogBeforeSync = "raftlog/before-sync"
	// RaftlogAfterSync: the batch is fsynced, but no message that relies on
	// it (a leader's MsgApp, a follower's MsgAppResp, a vote) has left.
	RaftlogAfterSync = "raftlog/after-sync"
	// FSMBeforeApply: a batch of committed entries, with its applied index,
	// is built and about to be committed to Pebble. A crash loses it, and
	// the restart must replay it from the raft log.
	FSMBeforeApply = "fsm/before-apply"
	// FSMAfterApply: the batch and its applied index are committed to
	// Pebble without fsync, and no client has been answered yet.
	FSMAfterApply = "fsm/after-apply"
	// SnapshotSend: the leader is streaming a checkpoint to a follower; hit
	// after each file.
	SnapshotSend = "snapshot/send"
	// SnapshotReceive: the follower is receiving a checkpoint; hit after
	// each file is written and fsynced.
	SnapshotReceive = "snapshot/receive"
	// SnapshotInstall: the follower has moved its state store aside and
	// not yet moved the received one in: the store directory is missing,
	// and Open must restore the old one.
	SnapshotInstall = "snapshot/install"
	// SnapshotInstalled: the received state is in place, but the raft log
	// has not yet taken the snapshot: the state is ahead of the log.
	SnapshotInstalled = "snapshot/installed"
)

// Names lists every failpoint.
func Names() []string {
	return []string{RaftlogBeforeSync, RaftlogAfterSync, FSMBeforeApply, FSMAfterApply,
		SnapshotSend, SnapshotReceive, SnapshotInstall, SnapshotInstalled}
}

func known(name string) bool {
	for _, n := range Names() {
		if n == name {
			return true
		}
	}
	return false
}

// Kind is what an armed failpoint does.
type Kind uint8

const (
	// Crash kills the process with SIGKILL.
	Crash Kind = iota + 1
	// Sleep stalls the hitting goroutine.
	Sleep
)

// Bounds on a spec: a count or a sleep beyond them is a typo, not a test.
const (
	maxCount = 1_000_000_000
	maxSleep = 10 * time.Minute
)

// Point is one armed failpoint.
type Point struct {
	Name string
	Kind Kind
	// Sleep is the stall of a Sleep point.
	Sleep time.Duration
	// At is the hit (1 = the first) on which the action happens; 0 means
	// every hit, which only a Sleep point may have.
	At uint64
}

// String formats p in the syntax Parse reads.
func (p Point) String() string {
	var s string
	switch p.Kind {
	case Crash:
		s = p.Name + "=crash"
	case Sleep:
		s = p.Name + "=sleep(" + p.Sleep.String() + ")"
	default:
		return p.Name + "=?"
	}
	if p.At != 0 {
		s += "@" + strconv.FormatUint(p.At, 10)
	}
	return s
}

// Parse reads a KVD_FAILPOINTS value. An empty or blank spec arms nothing.
func Parse(spec string) ([]Point, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	var out []Point
	seen := map[string]bool{}
	for _, item := range strings.Split(spec, ";") {
		p, err := parsePoint(strings.TrimSpace(item))
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", EnvVar, item, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("%s: failpoint %s armed twice", EnvVar, p.Name)
		}
		seen[p.Name] = true
		out = append(out, p)
	}
	return out, nil
}

func parsePoint(s string) (Point, error) {
	name, action, ok := strings.Cut(s, "=")
	if !ok {
		return Point{}, errors.New("want name=action")
	}
	name, action = strings.TrimSpace(name), strings.TrimSpace(action)
	if !known(name) {
		return Point{}, fmt.Errorf("unknown failpoint %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	p := Point{Name: name}
	if a, count, ok := strings.Cut(action, "@"); ok {
		n, err := strconv.ParseUint(count, 10, 64)
		if err != nil || n == 0 || n > maxCount {
			return Point{}, fmt.Errorf("hit count %q: want a whole number from 1 to %d", count, maxCount)
		}
		action, p.At = a, n
	}
	switch {
	case action == "crash":
		p.Kind = Crash
		if p.At == 0 {
			p.At = 1
		}
	case strings.HasPrefix(action, "sleep(") && strings.HasSuffix(action, ")"):
		d, err := time.ParseDuration(action[len("sleep(") : len(action)-1])
		if err != nil || d <= 0 || d > maxSleep {
			return Point{}, fmt.Errorf("sleep %q: want a duration above 0 and at most %s", action, maxSleep)
		}
		p.Kind, p.Sleep = Sleep, d
	default:
		return Point{}, fmt.Errorf("unknown action %q: want crash or sleep(duration)", action)
	}
	return p, nil
}

// ParseArm reads a KVD_FAILPOINTS_ARM value: whether hits count only after
// SIGUSR1.
func ParseArm(v string) (onUSR1 bool, err error) {
	switch strings.TrimSpace(v) {
	case "":
		return false, nil
	case ArmOnUSR1:
		return true, nil
	default:
		return false, fmt.Errorf("%s=%q: the only value is %q", ArmEnvVar, v, ArmOnUSR1)
	}
}
