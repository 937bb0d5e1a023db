package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Env is what a fault acts on.
type Env struct {
	Cluster *Cluster
	Rng     *rand.Rand
	Logf    func(format string, args ...any)
	// Target is the member the fault acts on, and Killed the members it
	// SIGKILLs to restart at heal, where a fault says (killOne, killAll,
	// pauseLeader, isolate): the vacuity check looks for their effect.
	Target *Node
	Killed []*Node
	// Marks are lines the target's log must have by heal (effectLogged):
	// a failpoint armed, a clock offset taken.
	Marks []string
	// ClockAhead is how far the cluster's time may legitimately run ahead
	// of the harness's clock: a member whose clock was that far ahead led
	// (clock-skew). The expiry probe's judge allows for it.
	ClockAhead time.Duration
}

// Fault is one kind of failure. Inject starts it and returns the function
// that ends it (heal); the harness calls heal exactly once, after a hold
// time it chooses, and then expects the cluster to recover by itself.
type Fault struct {
	Name string
	// Topologies are the cluster shapes the fault applies to. A fault
	// that runs on TwoAndWitness aims at the leader (always a data
	// member) or at a random member, the witness included; one that
	// cannot run there says why in its doc comment.
	Topologies []Topology
	// Args are extra `kvd serve` flags for every node of a run with this
	// fault (e.g. small compaction settings); -kvd-args come after them and
	// win.
	Args []string
	// ExpiryProbe runs the expiry probe (expiry.go) alongside traffic.
	ExpiryProbe bool
	// Inject starts the fault. It may look up the leader (and fail if none
	// shows up in time).
	Inject func(ctx context.Context, e *Env) (heal func(ctx context.Context) error, err error)
}

// Faults returns the registry: the process and network faults below, then
// the snapshot and membership faults (fault_cluster.go) and the failpoint
// crashes (fault_failpoint.go).
func Faults() []Fault {
	faults := []Fault{
		{Name: "kill-leader", Topologies: anyTopology, Inject: killOne(true)},
		{Name: "kill-follower", Topologies: manyNodes, Inject: killOne(false)},
		{Name: "kill-all", Topologies: anyTopology, Inject: killAll},
		{Name: "pause-leader", Topologies: anyTopology, Inject: pauseLeader},
		// The same pause with kvd's read lease on every node: the pause
		// (at least three election timeouts, 1.5s) outlasts the lease
		// (360ms with DefaultTiming, TestPauseOutlastsTheLease), so the
		// leader wakes with its lease expired and a stale lease read is a
		// linearizability violation.
		{Name: "pause-leader-lease", Topologies: anyTopology, Args: leaseArgs, Inject: pauseLeader},
		{Name: "partition-leader", Topologies: manyNodes, Inject: isolate(true)},
		{Name: "partition-follower", Topologies: manyNodes, Inject: isolate(false)},
		{Name: "cut-leader-outbound", Topologies: manyNodes, Inject: oneWay(true)},
		{Name: "cut-leader-inbound", Topologies: manyNodes, Inject: oneWay(false)},
		{Name: "delay-peers", Topologies: manyNodes, Inject: delayPeers},
		{Name: "reset-peers", Topologies: manyNodes, Inject: resetPeers},
	}
	faults = append(faults, clusterFaults()...)
	faults = append(faults, failpointFaults()...)
	return append(faults, clockFaults...)
}

// leaseArgs: reads through kvd's read lease (internal/replica/lease.go).
var leaseArgs = []string{"--read-consistency", "lease"}

// clockFaults need a failpoint build (NeedsFailpoints). clock-skew skips a
// single node: restarting it stops the cluster's time while it is down
// when its clock is behind (nothing stamps), which is the design, not what
// this fault tests.
var clockFaults = []Fault{
	{Name: "clock-skew", Topologies: manyNodes, ExpiryProbe: true, Inject: clockSkew},
	{Name: "slow-disk", Topologies: anyTopology, Inject: slowDisk},
}

// Topology sets of the registry.
var (
	anyTopology = []Topology{OneNode, ThreeNodes, TwoAndWitness}
	manyNodes   = []Topology{ThreeNodes, TwoAndWitness}
)

// Fits reports whether f applies to topo.
func (f Fault) Fits(topo Topology) bool { return slices.Contains(f.Topologies, topo) }

// FaultByName finds a registered fault.
func FaultByName(name string) (Fault, error) {
	for _, f := range Faults() {
		if f.Name == name {
			return f, nil
		}
	}
	return Fault{}, fmt.Errorf("unknown fault %q", name)
}

// pick returns the leader (leader true) or a random follower, which may
// be a witness.
func pick(ctx context.Context, e *Env, leader bool) (*Node, error) {
	lead, err := e.Cluster.Leader(ctx, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("find the leader: %w", err)
	}
	if lead.Witness {
		return nil, fmt.Errorf("witness %s claims to lead", lead.Name)
	}
	if leader {
		return lead, nil
	}
	others := e.Cluster.Others(lead)
	return others[e.Rng.IntN(len(others))], nil
}

func killOne(leader bool) func(context.Context, *Env) (func(context.Context) error, error) {
	return func(ctx context.Context, e *Env) (func(context.Context) error, error) {
		n, err := pick(ctx, e, leader)
		if err != nil {
			return nil, err
		}
		e.Logf("SIGKILL %s", n.Name)
		e.Target, e.Killed = n, []*Node{n}
		n.Kill()
		return func(context.Context) error {
			e.Logf("restart %s", n.Name)
			return n.Restart()
		}, nil
	}
}

func killAll(_ context.Context, e *Env) (func(context.Context) error, error) {
	nodes := e.Cluster.Nodes
	e.Killed = nodes
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Kill() }()
	}
	wg.Wait()
	e.Logf("SIGKILL all %d nodes", len(nodes))
	return func(context.Context) error {
		e.Logf("restart all nodes")
		var errs []error
		for _, n := range nodes {
			errs = append(errs, n.Restart())
		}
		return errors.Join(errs...)
	}, nil
}

// pauseLeader stops the leader; the harness holds faults well past the
// election timeout, so the others elect a new leader while it sleeps, and
// when it wakes it still believes it leads until it hears otherwise: the
// classic window for stale reads.
func pauseLeader(ctx context.Context, e *Env) (func(context.Context) error, error) {
	n, err := pick(ctx, e, true)
	if err != nil {
		return nil, err
	}
	e.Logf("SIGSTOP %s", n.Name)
	e.Target = n
	if err := n.Pause(); err != nil {
		return nil, fmt.Errorf("pause %s: %w", n.Name, err)
	}
	return func(context.Context) error {
		e.Logf("SIGCONT %s", n.Name)
		return n.Resume()
	}, nil
}

// heal lifts the network fault and fails if it had no effect (delay: no
// traffic was held back; otherwise: no connection was cut or refused).
func heal(e *Env, delay bool) func(context.Context) error {
	return func(context.Context) error {
		eff := e.Cluster.Net.Heal()
		e.Logf("heal the network (the fault closed or refused %d peer connections, delayed %d chunks)", eff.Cut, eff.Delayed)
		return checkEffect(eff, delay)
	}
}

func isolate(leader bool) func(context.Context, *Env) (func(context.Context) error, error) {
	return func(ctx context.Context, e *Env) (func(context.Context) error, error) {
		n, err := pick(ctx, e, leader)
		if err != nil {
			return nil, err
		}
		e.Logf("isolate %s", n.Name)
		e.Target = n
		e.Cluster.Net.Isolate(n.ID, e.Cluster.IDs())
		return heal(e, false), nil
	}
}

// oneWay cuts the leader's messages to the others (outbound) or theirs to
// it (inbound), leaving the other direction working.
func oneWay(outbound bool) func(context.Context, *Env) (func(context.Context) error, error) {
	return func(ctx context.Context, e *Env) (func(context.Context) error, error) {
		lead, err := pick(ctx, e, true)
		if err != nil {
			return nil, err
		}
		for _, o := range e.Cluster.Others(lead) {
			if outbound {
				e.Cluster.Net.Cut(lead.ID, o.ID)
			} else {
				e.Cluster.Net.Cut(o.ID, lead.ID)
			}
		}
		e.Logf("cut leader %s one way (outbound %v)", lead.Name, outbound)
		return heal(e, false), nil
	}
}

func delayPeers(_ context.Context, e *Env) (func(context.Context) error, error) {
	el := e.Cluster.Timing.ElectionTimeout
	// From a fifth of the election timeout up to a little more than half:
	// slow enough to lose heartbeats now and then, not a partition.
	d := el/5 + time.Duration(e.Rng.Int64N(int64(el/2)))
	e.Logf("delay peer messages by %s", d)
	e.Cluster.Net.SetDelay(d)
	return heal(e, true), nil
}

func resetPeers(_ context.Context, e *Env) (func(context.Context) error, error) {
	every := time.Duration(50+e.Rng.IntN(250)) * time.Millisecond
	e.Logf("reset every peer connection every %s", every)
	stop := make(chan struct{})
	done := make(chan struct{})
	reset := 0 // connections closed; read after done
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				reset += e.Cluster.Net.ResetAll()
			}
		}
	}()
	return func(context.Context) error {
		close(stop)
		<-done
		e.Logf("stop resetting peer connections (%d reset)", reset)
		if reset == 0 {
			return errors.New("no peer connection was reset: the fault had no effect")
		}
		return nil
	}, nil
}
