package robustness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kvd-project/kvd/internal/failpoint"
)

// Faults of time and of a slow disk, on a failpoint build of kvd
// (NeedsFailpoints):
//
//   - clock-skew restarts one data member with KVD_CLOCK_OFFSET_FILE and,
//     for the fault window, writes that file: the member's wall clock is
//     several seconds off and jumps between offsets. The expiry probe
//     (expiry.go) runs alongside and judges reads by this process's clock.
//   - slow-disk restarts one member with raftlog/before-sync sleeping on
//     every fsync of its raft log, and restarts it without at heal.
//
// Either targets a follower on most runs and the leader on a third: the
// leader stamps every write, so its clock is the one that could move
// expiry, and its fsync is on every commit's path.

// clockFaultTargetsLeader and slowDiskTargetsLeader draw the target: the
// leader on a third of the runs with more than one data member (on a
// single node the node is the leader).
func targetsLeader(e *Env) bool {
	return len(e.Cluster.DataNodes()) == 1 || e.Rng.IntN(3) == 0
}

// Clock offsets, drawn per step: 5s to 20s, within the 30s a member
// trusts the log's time from its own clock (clusterclock.MaxTrustedSkew)
// with room for an offset change to land before a stamp is checked.
const (
	minSkew = 5 * time.Second
	maxSkew = 20 * time.Second
)

// drawSkew returns an offset of minSkew..maxSkew in 100ms steps: behind
// (negative) for the leader, either way for a follower.
func drawSkew(e *Env, behindOnly bool) time.Duration {
	d := minSkew + time.Duration(e.Rng.Int64N(int64((maxSkew-minSkew)/(100*time.Millisecond))+1))*100*time.Millisecond
	if behindOnly || e.Rng.IntN(2) == 0 {
		return -d
	}
	return d
}

// writeOffset replaces n's clock file atomically (the member re-reads it
// every 50ms and must never see it half written).
func writeOffset(path string, d time.Duration) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(d.String()), 0o600); err != nil {
		return fmt.Errorf("clock file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("clock file: %w", err)
	}
	return nil
}

// clockSkew skews one data member's clock. A follower's clock goes
// either way, a leader's only behind: a leader whose clock is ahead moves
// the cluster's time forward by design (README: "In a cluster, time is the
// leader's clock"), which would make the probe's items expire early for a
// reason kvd documents. Should a follower that is ahead win an election
// during the window all the same, heal sets Env.ClockAhead, which the
// probe's judge allows for.
func clockSkew(ctx context.Context, e *Env) (func(context.Context) error, error) {
	leader := targetsLeader(e)
	n, err := pickData(ctx, e, leader)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(filepath.Dir(n.LogPath), n.Name+".clock")
	first := drawSkew(e, leader)
	if err := writeOffset(path, first); err != nil {
		return nil, err
	}
	e.Target = n
	// The line the member logs when it starts with the file: the effect
	// vacuity.go looks for.
	e.Marks = []string{fmt.Sprintf("failpoint clock: offset %s, from %s", first, path)}
	e.Logf("restart %s (leader %v) with %s=%s, offset %s", n.Name, leader, failpoint.ClockEnvVar, path, first)
	n.Kill()
	n.SetNextEnv(failpoint.ClockEnvVar + "=" + path)
	if err := n.Restart(); err != nil {
		return nil, err
	}
	if leader && len(e.Cluster.Nodes) > 1 {
		if err := e.Cluster.WaitReady(ctx, n); err != nil {
			return nil, fmt.Errorf("skewed %s: %w", n.Name, err)
		}
		if err := moveLeader(ctx, e, n); err != nil {
			return nil, fmt.Errorf("skewed %s: %w", n.Name, err)
		}
	}
	// Jumps: a new offset every 200–600ms until heal.
	stop, done := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	written := []time.Duration{first}
	var werr error
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(200+e.Rng.IntN(400)) * time.Millisecond):
			}
			d := drawSkew(e, leader)
			mu.Lock()
			written = append(written, d)
			if err := writeOffset(path, d); err != nil && werr == nil {
				werr = err
			}
			mu.Unlock()
		}
	}()
	return func(ctx context.Context) error {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		var ahead time.Duration
		for _, d := range written {
			ahead = max(ahead, d)
		}
		e.Logf("%s's clock took %d offsets %v; set it back to 0", n.Name, len(written), written)
		if err := writeOffset(path, 0); err != nil {
			return errors.Join(werr, err)
		}
		if ahead > 0 {
			if ledIn(lastLaunch(n.LogPath), n.ID) {
				e.Logf("%s led while its clock was up to %s ahead: the cluster's time may have moved forward that much", n.Name, ahead)
				e.ClockAhead = ahead
			}
		}
		err := poll(ctx, 2*time.Second, n.Name+" takes offset 0", func() (bool, error) {
			if !n.Running() {
				return false, fmt.Errorf("%w: %s exited; its log ends:\n%s", errGiveUp, n.Name, logTail(n.LogPath, 15))
			}
			return strings.Contains(lastLaunch(n.LogPath), "failpoint clock: offset 0s\n"), nil
		})
		return errors.Join(werr, err)
	}, nil
}

// pickData is pick among data members: a follower that is a witness
// would judge no expiry anyone reads.
func pickData(ctx context.Context, e *Env, leader bool) (*Node, error) {
	if leader {
		return pick(ctx, e, true)
	}
	lead, err := pick(ctx, e, true)
	if err != nil {
		return nil, err
	}
	others := dataOnly(e.Cluster.Others(lead))
	if len(others) == 0 {
		return nil, errors.New("no data follower")
	}
	return others[e.Rng.IntN(len(others))], nil
}

// slowDisk restarts one member (a follower, the witness included, or the
// leader, made leader again) with every raft log fsync delayed by
// 100–400ms; heal restarts it without. The member must still be running at
// heal: a sleep is not a crash.
func slowDisk(ctx context.Context, e *Env) (func(context.Context) error, error) {
	leader := targetsLeader(e)
	n, err := pick(ctx, e, leader)
	if err != nil {
		return nil, err
	}
	p := failpoint.Point{Name: failpoint.RaftlogBeforeSync, Kind: failpoint.Sleep,
		Sleep: time.Duration(100+e.Rng.IntN(31)*10) * time.Millisecond}
	spec := p.String()
	e.Target = n
	e.Marks = []string{"failpoint armed: " + spec + "\n"}
	if err := arm(ctx, e, n, spec, leader && len(e.Cluster.Nodes) > 1); err != nil {
		return nil, err
	}
	return func(context.Context) error {
		if !n.Running() {
			err := fmt.Errorf("%s (armed with %s) exited during the fault; its log ends:\n%s", n.Name, spec, logTail(n.LogPath, 15))
			return errors.Join(err, n.Restart())
		}
		e.Logf("restart %s without failpoints", n.Name)
		n.Kill()
		return n.Restart()
	}, nil
}

// ledIn reports whether a log names id as the new leader.
func ledIn(log string, id uint64) bool {
	to := fmt.Sprintf(" to=%d ", id)
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="leader changed"`) && strings.Contains(l, to) {
			return true
		}
	}
	return false
}
