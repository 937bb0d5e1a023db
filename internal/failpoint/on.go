//go:build failpoints && unix

package failpoint

import (
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

type armed struct {
	Point
	hits atomic.Uint64
}

var (
	// points is written once, in init, and only read afterwards.
	points map[string]*armed
	// counting is false while KVD_FAILPOINTS_ARM holds the points back.
	counting atomic.Bool
)

// init arms the failpoints before main runs: a bad spec must stop the
// process before it serves anything, not be ignored.
func init() {
	if err := arm(os.Getenv(EnvVar), os.Getenv(ArmEnvVar)); err != nil {
		fmt.Fprintf(os.Stderr, "kvd: failpoints: %v\n", err)
		os.Exit(2)
	}
}

func arm(spec, armOn string) error {
	ps, err := Parse(spec)
	if err != nil {
		return err
	}
	onUSR1, err := ParseArm(armOn)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		return nil
	}
	points = make(map[string]*armed, len(ps))
	for _, p := range ps {
		points[p.Name] = &armed{Point: p}
		fmt.Fprintf(os.Stderr, "failpoint armed: %s\n", p)
	}
	if !onUSR1 {
		counting.Store(true)
		return nil
	}
	fmt.Fprintf(os.Stderr, "failpoints wait for SIGUSR1 before counting hits\n")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		<-ch
		signal.Stop(ch)
		counting.Store(true)
		fmt.Fprintf(os.Stderr, "failpoints: SIGUSR1 received, counting hits\n")
	}()
	return nil
}

// Hit marks the failpoint name and does what KVD_FAILPOINTS armed it with.
func Hit(name string) {
	p := points[name]
	if p == nil || !counting.Load() {
		return
	}
	n := p.hits.Add(1)
	if p.At != 0 && n != p.At {
		return
	}
	switch p.Kind {
	case Crash:
		// os.Stderr is unbuffered: the line is out before the signal.
		fmt.Fprintf(os.Stderr, "failpoint %s: crash on hit %d\n", name, n)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		for {
			// SIGKILL cannot be caught; nothing after the boundary runs.
			time.Sleep(time.Hour)
		}
	case Sleep:
		time.Sleep(p.Sleep)
	}
}
