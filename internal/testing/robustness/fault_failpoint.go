package robustness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/kvd-project/kvd/internal/failpoint"
)

// A failpoint crash restarts one node with KVD_FAILPOINTS set, so that it
// kills itself (SIGKILL) at a named durability boundary during traffic:
// between building a raft log batch and its fsync, right after the fsync,
// around the state machine's commit, in the middle of a snapshot stream or
// of a snapshot install. Heal restarts it without the failpoint. A node
// that never reaches its failpoint within the fault window fails the fault:
// a crash that did not happen tested nothing. These faults need a kvd built
// with -tags failpoints (NeedsFailpoints).

// crashAt describes one failpoint fault.
type crashAt struct {
	name  string
	point string
	// leader: the node crashes while it leads; otherwise as a follower.
	leader bool
	topos  []Topology
	// maxHit: the crash comes on a hit drawn from 1..maxHit.
	maxHit int
	// snapshot: the target crashes while a snapshot is shipped to (or
	// from) a follower that fell behind the compacted log.
	snapshot bool
}

var failpointCrashes = []crashAt{
	{name: "crash-leader-before-sync", point: failpoint.RaftlogBeforeSync, leader: true, topos: anyTopology, maxHit: 30},
	{name: "crash-leader-after-sync", point: failpoint.RaftlogAfterSync, leader: true, topos: anyTopology, maxHit: 30},
	{name: "crash-follower-before-sync", point: failpoint.RaftlogBeforeSync, topos: manyNodes, maxHit: 30},
	{name: "crash-follower-after-sync", point: failpoint.RaftlogAfterSync, topos: manyNodes, maxHit: 30},
	{name: "crash-leader-before-apply", point: failpoint.FSMBeforeApply, leader: true, topos: anyTopology, maxHit: 30},
	{name: "crash-leader-after-apply", point: failpoint.FSMAfterApply, leader: true, topos: anyTopology, maxHit: 30},
	{name: "crash-follower-before-apply", point: failpoint.FSMBeforeApply, topos: manyNodes, maxHit: 30},
	{name: "crash-follower-after-apply", point: failpoint.FSMAfterApply, topos: manyNodes, maxHit: 30},
	// A checkpoint has a handful of files (manifest, options, markers,
	// WAL, sstables); the stream hits after each, so a small count is
	// always reached.
	{name: "crash-leader-snapshot-send", point: failpoint.SnapshotSend, leader: true, topos: manyNodes, maxHit: 2, snapshot: true},
	{name: "crash-follower-snapshot-receive", point: failpoint.SnapshotReceive, topos: manyNodes, maxHit: 2, snapshot: true},
	{name: "crash-follower-snapshot-install", point: failpoint.SnapshotInstall, topos: manyNodes, maxHit: 1, snapshot: true},
	{name: "crash-follower-snapshot-installed", point: failpoint.SnapshotInstalled, topos: manyNodes, maxHit: 1, snapshot: true},
}

// failpointFaults crash a node at a named failpoint.
func failpointFaults() []Fault {
	out := make([]Fault, 0, len(failpointCrashes))
	for _, c := range failpointCrashes {
		f := Fault{Name: c.name, Topologies: c.topos, Inject: c.inject}
		if c.snapshot {
			f.Args = snapshotArgs
		}
		out = append(out, f)
	}
	return out
}

// NeedsFailpoints reports whether f only works on a kvd built with
// -tags failpoints.
func NeedsFailpoints(f Fault) bool {
	for _, c := range failpointCrashes {
		if c.name == f.Name {
			return true
		}
	}
	for _, c := range clockFaults {
		if c.Name == f.Name {
			return true
		}
	}
	return false
}

func (c crashAt) inject(ctx context.Context, e *Env) (func(context.Context) error, error) {
	spec := fmt.Sprintf("%s=crash@%d", c.point, 1+e.Rng.IntN(c.maxHit))
	var target *Node
	var err error
	switch {
	case c.snapshot && c.leader:
		target, err = c.armSender(ctx, e, spec)
	case c.snapshot:
		target, err = c.armReceiver(ctx, e, spec)
	default:
		target, err = pick(ctx, e, c.leader)
		if err == nil {
			err = arm(ctx, e, target, spec, c.leader && len(e.Cluster.Nodes) > 1)
		}
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return c.heal(ctx, e, target, spec) }, nil
}

// arm restarts n with spec. For a leader of a multi-node cluster the
// restarted node is only a follower, so its failpoints are held (KVD_FAILPOINTS_ARM)
// until leadership has been moved to it, and then released with SIGUSR1.
func arm(ctx context.Context, e *Env, n *Node, spec string, makeLeader bool) error {
	e.Logf("restart %s with %s=%s", n.Name, failpoint.EnvVar, spec)
	n.Kill()
	env := []string{failpoint.EnvVar + "=" + spec}
	if makeLeader {
		env = append(env, failpoint.ArmEnvVar+"="+failpoint.ArmOnUSR1)
	}
	n.SetNextEnv(env...)
	if err := n.Restart(); err != nil {
		return err
	}
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	go func() { <-exited; e.Logf("%s (armed with %s) exited", n.Name, spec) }()
	if !makeLeader {
		return nil
	}
	if err := e.Cluster.WaitReady(ctx, n); err != nil {
		return fmt.Errorf("armed %s: %w", n.Name, err)
	}
	if err := moveLeader(ctx, e, n); err != nil {
		return fmt.Errorf("armed %s: %w", n.Name, err)
	}
	e.Logf("release %s's failpoint (SIGUSR1)", n.Name)
	return signalNode(n, syscall.SIGUSR1)
}

// moveLeader transfers leadership to n (through n itself: a follower
// forwards the request) and waits until n leads.
func moveLeader(ctx context.Context, e *Env, n *Node) error {
	return poll(ctx, 15*time.Second, "leadership moves to "+n.Name, func() (bool, error) {
		if !n.Running() {
			return false, fmt.Errorf("%w: %s exited; its log ends:\n%s", errGiveUp, n.Name, logTail(n.LogPath, 15))
		}
		if lead, term := e.Cluster.leaderTerm(ctx); lead == n {
			e.Logf("%s leads (term %d)", n.Name, term)
			return true, nil
		}
		status, body, err := e.Cluster.admin(ctx, http.MethodPost, "http://"+n.HTTPAddr+"/v1/cluster/transfer-leader", map[string]string{"to": n.Name})
		if err != nil {
			return false, err
		}
		if status != http.StatusOK {
			return false, fmt.Errorf("transfer-leader: HTTP %d: %s", status, bytes.TrimSpace(body))
		}
		return false, nil
	})
}

// armReceiver keeps a follower away until the others have compacted their
// logs past it, then brings it back with spec: the leader must send it a
// snapshot, and it crashes receiving or installing it.
func (c crashAt) armReceiver(ctx context.Context, e *Env, spec string) (*Node, error) {
	f, err := pick(ctx, e, false)
	if err != nil {
		return nil, err
	}
	e.Logf("SIGKILL follower %s until the log is compacted past it", f.Name)
	f.Kill()
	if err := waitCompactedPast(ctx, e, f, nil); err != nil {
		// Back without the failpoint, so that the run still recovers.
		return nil, errors.Join(err, f.Restart())
	}
	return f, arm(ctx, e, f, spec, false)
}

// armSender restarts the leader with spec and makes it lead again, then
// keeps a follower away until the log is compacted past it and brings it
// back: the armed leader crashes while streaming it a snapshot.
func (c crashAt) armSender(ctx context.Context, e *Env, spec string) (*Node, error) {
	lead, err := pick(ctx, e, true)
	if err != nil {
		return nil, err
	}
	if err := arm(ctx, e, lead, spec, true); err != nil {
		return nil, err
	}
	others := e.Cluster.Others(lead)
	f := others[e.Rng.IntN(len(others))]
	e.Logf("SIGKILL follower %s until the log is compacted past it", f.Name)
	f.Kill()
	err = waitCompactedPast(ctx, e, f, lead)
	if !lead.Running() {
		// With logs this short, the new leader may stream a snapshot to the
		// other follower, which lagged a little, and crash on that: the
		// failpoint fired mid-stream all the same (heal checks its log
		// line), but the wait is moot and f must come back for a quorum.
		e.Logf("%s crashed before %s came back", lead.Name, f.Name)
		err = nil
	}
	e.Logf("restart %s: it needs a snapshot", f.Name)
	if rerr := f.Restart(); rerr != nil || err != nil {
		return nil, errors.Join(err, rerr)
	}
	return lead, nil
}

// waitCompactedPast waits (writing filler keys if traffic is not enough)
// until the running nodes have applied far enough past what the stopped
// node f can hold that their logs no longer reach back to it. It gives up
// after 10s, or as soon as watch (if not nil) exits: the filler writes
// would then wait on a lost quorum.
func waitCompactedPast(ctx context.Context, e *Env, f, watch *Node) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if watch != nil {
		watch.mu.Lock()
		exited := watch.exited
		watch.mu.Unlock()
		go func() {
			select {
			case <-exited:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	var running []*Node
	var behind uint64
	for _, n := range e.Cluster.Others(f) {
		if st, err := e.Cluster.Status(ctx, n); err == nil && n.Running() {
			running = append(running, n)
			behind = max(behind, st.Commit)
		}
	}
	if len(running) == 0 {
		return errors.New("no running node to compact its log past the stopped follower")
	}
	writes, err := fill(ctx, e.Cluster, running, behind+snapshotLag)
	if err != nil {
		return fmt.Errorf("compact past %s: %w", f.Name, err)
	}
	e.Logf("others applied past %d (%d filler writes)", behind+snapshotLag, writes)
	return nil
}

// heal checks that n crashed at its failpoint, and restarts it without
// one. If n is still running, the fault did not happen: n is restarted all
// the same, so that the run recovers, and the fault fails.
func (c crashAt) heal(ctx context.Context, e *Env, n *Node, spec string) error {
	var errs []error
	// The hold is the fault window; a crash a moment late still counts,
	// a node that is slow to reach the failpoint does not get longer.
	if err := poll(ctx, time.Second, n.Name+" crashes at "+spec, func() (bool, error) { return !n.Running(), nil }); err != nil {
		errs = append(errs, fmt.Errorf("%s never crashed at its failpoint (%s) within the fault window", n.Name, spec))
		n.Kill()
	} else if want := fmt.Sprintf("failpoint %s: crash on hit", c.point); !strings.Contains(lastLaunch(n.LogPath), want) {
		errs = append(errs, fmt.Errorf("%s exited, but not at its failpoint %s; its log ends:\n%s", n.Name, spec, logTail(n.LogPath, 15)))
	} else {
		e.Logf("%s crashed at %s", n.Name, spec)
	}
	e.Logf("restart %s without failpoints", n.Name)
	errs = append(errs, n.Restart())
	return errors.Join(errs...)
}

// lastLaunch returns the part of a node's log written by its latest
// process (after the harness's last start banner).
func lastLaunch(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndex(s, "==== robustness: start"); i >= 0 {
		s = s[i:]
	}
	return s
}

// lastLaunchesSince returns the part of a node's log written by its
// launches after the first `starts` of them (all of it for 0).
func lastLaunchesSince(path string, starts int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	const banner = "==== robustness: start"
	for range starts {
		i := strings.Index(s, banner)
		if i < 0 {
			return ""
		}
		s = s[i+len(banner):]
	}
	if i := strings.Index(s, banner); i >= 0 {
		return s[i:]
	}
	return ""
}

// signalNode sends sig to n's process.
func signalNode(n *Node, sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return fmt.Errorf("signal %s: not running", n.Name)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", n.Name, err)
	}
	return nil
}
