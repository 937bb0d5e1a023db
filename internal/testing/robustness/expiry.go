package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// The expiry probe (issue #49 part 2) checks the cluster clock from the
// outside: runs of a fault with Fault.ExpiryProbe set keys with a short
// lifetime through random data members and read them back (plain get,
// the member's default consistency) from random data members before and
// after their expiry, judged by this process's clock. The harness never
// skews its own clock, nor the leader's ahead (fault_clock.go), so the
// cluster's time is this clock's, up to the few milliseconds an entry
// takes to reach a member; a member that judged expiry by its own skewed
// clock is seconds off and shows up as a violation.
//
// Probe keys (exp<worker>-<n>) are not workload keys: porcupine never
// sees them, and every probe key has a single set and no other write.

// expiryTolerance is the margin around an item's expiry inside which no
// read is judged. kvd promises expiry by the leader's clock up to the time
// an applied entry takes to reach a member plus its monotonic drift since
// (clusterclock): milliseconds on loopback, up to ~100ms on a loaded
// 2-core machine. 250ms is above that and far below the seconds of skew
// the clock faults inject.
const expiryTolerance = 250 * time.Millisecond

// Probe bounds: per worker at most probeKeys keys, each read every
// 100–200ms from its set until a second past its expiry.
const (
	probeWorkers = 3
	probeKeys    = 20
	probeTimeout = time.Second
)

// probeOp is one probe operation, in history time (ns since the run's
// start, this process's monotonic clock).
type probeOp struct {
	Key  string `json:"key"`
	Node string `json:"node"`
	// Set: the key's one set, with lifetime TTL; otherwise a get.
	Set bool          `json:"set,omitempty"`
	TTL time.Duration `json:"ttl,omitempty"`
	// Call and Return bound the operation; OK is a definite reply (for a
	// set, STORED), Hit a get that returned the item.
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	OK     bool   `json:"ok"`
	Hit    bool   `json:"hit,omitempty"`
	Err    string `json:"err,omitempty"`
}

// ExpiryResult is what the probe did and found.
type ExpiryResult struct {
	// Ops counts probe operations, Judged the reads the judge could
	// decide (Before: within the item's life; After: past it).
	Ops    int `json:"ops"`
	Before int `json:"judged_before"`
	After  int `json:"judged_after"`
	// Violations: items served after their expiry or hidden before it.
	Violations []string `json:"violations,omitempty"`
	// judged are the decided reads, for the vacuity check.
	judged []judgedRead
	// lastExpiry is the latest expiry (upper bound) of a stored item.
	lastExpiry int64
}

// judgedRead is a read the judge decided: before (inside the item's life)
// or after its expiry.
type judgedRead struct {
	node   string
	call   int64
	before bool
}

// judgeExpiry judges a probe history. For a key with a set called at S0,
// acknowledged STORED at S1, lifetime T, the item's expiry by the
// cluster's time lies in [S0+T, S1+T] (the leader stamps the write in
// between). A get called at R0, answered at R1, with R0 > S1 (after the
// set, in real time):
//
//   - that returns the item although R0 > S1 + T + tol was served after
//     expiry;
//   - that returns nothing although R1 < S0 + T - tol - ahead hid the item
//     before expiry.
//
// Other reads are not judged: too close to the expiry, concurrent with the
// set, failed, or of a key whose set was not acknowledged (its outcome and
// time unknown). ahead is how far the cluster's time may legitimately be
// ahead of this clock (a member whose clock was ahead led: the design
// lets it move the cluster's time forward).
func judgeExpiry(ops []probeOp, tol, ahead time.Duration) ExpiryResult {
	res := ExpiryResult{Ops: len(ops)}
	sets := map[string]probeOp{}
	for _, o := range ops {
		if !o.Set {
			continue
		}
		if o.OK {
			res.lastExpiry = max(res.lastExpiry, o.Return+int64(o.TTL))
		}
		if _, dup := sets[o.Key]; dup {
			res.Violations = append(res.Violations, fmt.Sprintf("probe bug: key %s set twice", o.Key))
			continue
		}
		sets[o.Key] = o
	}
	sec := func(ns int64) float64 { return time.Duration(ns).Seconds() }
	for _, r := range ops {
		s, ok := sets[r.Key]
		if r.Set || !r.OK || !ok || !s.OK || r.Call <= s.Return {
			continue
		}
		lower, upper := s.Call+int64(s.TTL), s.Return+int64(s.TTL)
		switch {
		case r.Call > upper+int64(tol):
			res.After++
			res.judged = append(res.judged, judgedRead{node: r.Node, call: r.Call})
			if r.Hit {
				res.Violations = append(res.Violations, fmt.Sprintf(
					"%s served by %s after its expiry: get at %.3fs–%.3fs, set at %.3fs–%.3fs with a %s lifetime (expired by %.3fs)",
					r.Key, r.Node, sec(r.Call), sec(r.Return), sec(s.Call), sec(s.Return), s.TTL, sec(upper)))
			}
		case r.Return < lower-int64(tol+ahead):
			res.Before++
			res.judged = append(res.judged, judgedRead{node: r.Node, call: r.Call, before: true})
			if !r.Hit {
				res.Violations = append(res.Violations, fmt.Sprintf(
					"%s hidden by %s before its expiry: get at %.3fs–%.3fs, set at %.3fs–%.3fs with a %s lifetime (live until %.3fs at least)",
					r.Key, r.Node, sec(r.Call), sec(r.Return), sec(s.Call), sec(s.Return), s.TTL, sec(lower)))
			}
		}
	}
	return res
}

// judgedOn counts the judged reads sent to node and called within w.
func (r ExpiryResult) judgedOn(node string, w Window) int {
	n := 0
	for _, j := range r.judged {
		if j.node == node && j.call >= w.Inject && j.call <= w.Heal {
			n++
		}
	}
	return n
}

// runExpiryProbe runs the probe's workers on the data members until ctx
// ends or each has probed probeKeys keys, and returns every operation in
// call order.
func runExpiryProbe(ctx context.Context, nodes []*Node, now func() int64, seed uint64) []probeOp {
	var mu sync.Mutex
	var all []probeOp
	var wg sync.WaitGroup
	for w := range probeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := probeWorker(ctx, w, nodes, now, rand.New(rand.NewPCG(seed, uint64(w))))
			mu.Lock()
			all = append(all, ops...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].Call < all[j].Call })
	return all
}

func probeWorker(ctx context.Context, w int, nodes []*Node, now func() int64, rng *rand.Rand) []probeOp {
	conns := map[*Node]*mcConn{}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	var ops []probeOp
	do := func(key string, set bool, ttl time.Duration) probeOp {
		n := nodes[rng.IntN(len(nodes))]
		op := probeOp{Key: key, Node: n.Name, Set: set, TTL: ttl, Call: now()}
		err := func() error {
			c := conns[n]
			if c == nil {
				var err error
				if c, err = dialMC(n.MemcacheAddr, probeTimeout, n.sec); err != nil {
					return err
				}
				conns[n] = c
			}
			if set {
				s, err := c.storeTTL(key, "v", int(ttl/time.Second))
				op.OK = err == nil && s == "STORED"
				if err == nil && s != "STORED" {
					return fmt.Errorf("set: %s", s)
				}
				return err
			}
			it, err := c.get(key, false)
			op.OK, op.Hit = err == nil, it.Found
			return err
		}()
		op.Return = now()
		if err != nil {
			op.OK, op.Err = false, err.Error()
			if c := conns[n]; c != nil {
				_ = c.Close()
				delete(conns, n)
			}
		}
		ops = append(ops, op)
		return op
	}
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for i := 0; i < probeKeys && ctx.Err() == nil; i++ {
		key := fmt.Sprintf("exp%d-%d", w, i)
		ttl := time.Duration(1+rng.IntN(2)) * time.Second
		set := do(key, true, ttl)
		if !set.OK {
			if !pause(50 * time.Millisecond) {
				break
			}
			continue
		}
		end := set.Return + int64(ttl+time.Second)
		for now() < end && pause(time.Duration(100+rng.IntN(100))*time.Millisecond) {
			do(key, false, 0)
		}
	}
	return ops
}
