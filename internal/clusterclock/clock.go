// Package clusterclock owns the time kvd judges expiry and delayed
// flush_all by: the leader's clock, carried in the log, not each member's.
//
// Every write's command carries a stamp (command.Command.Stamp) that apply
// turns into absolute expiry and flush times. The leader writes that stamp
// as it appends the proposal, whichever member the client wrote to
// (replica Config.Stamp), so a member whose clock is off stamps nothing.
// Reads and the expiry sweeper judge by Now: the latest stamp this member
// applied, advanced by its monotonic clock since it applied it. A member's
// wall clock is read only until it has applied a stamp it trusts, and by
// the leader, whose stamps never go back: a new leader whose clock is
// behind carries on from the latest stamp instead.
//
// What remains: an item is never served after its expiry by the leader's
// clock, nor hidden before it, up to the time an applied entry takes to
// reach a member (it sees the cluster's time that much late) and the drift
// of its monotonic clock since its last applied write. A leader whose
// clock is ahead moves the cluster's time forward with it; one behind
// does nothing. A member trusts an applied stamp within MaxTrustedSkew of
// its own clock: further off is either a log replayed at a restart (old
// stamps, which must not stop time) or a host clock broken beyond what
// kvd can mend, which Skew shows and the node logs.
package clusterclock

import (
	"sync"
	"sync/atomic"
	"time"
)

// MaxTrustedSkew is how far an applied stamp may be from this member's
// clock and still set its time.
const MaxTrustedSkew = 30 * time.Second

// Clock is one member's view of the cluster's time. Its methods are safe
// for concurrent use.
type Clock struct {
	wall func() time.Time // the host clock (a test's, or a skewed one)
	mono func() time.Time // time.Now: its monotonic reading measures elapsed time

	// base is the latest trusted stamp and the monotonic reading when it
	// was applied; nil until one is.
	base atomic.Pointer[anchor]
	// skew is the latest applied stamp minus this member's wall clock
	// then, in ns: positive when this member's clock is behind.
	skew atomic.Int64

	mu     sync.Mutex
	issued int64 // the last stamp Stamp returned
}

type anchor struct {
	stamp int64
	at    time.Time
}

// New makes a clock over the host clock wall (time.Now in production).
func New(wall func() time.Time) *Clock {
	return &Clock{wall: wall, mono: time.Now}
}

// Now is the cluster's time as this member knows it.
func (c *Clock) Now() time.Time {
	a := c.base.Load()
	if a == nil {
		return c.wall()
	}
	return time.Unix(0, a.stamp+int64(c.mono().Sub(a.at)))
}

// Stamp is the time the leader writes into a proposal: its own clock, but
// never earlier than the cluster's time it knows, nor than its last stamp.
func (c *Clock) Stamp() int64 {
	s := max(c.wall().UnixNano(), c.Now().UnixNano())
	c.mu.Lock()
	defer c.mu.Unlock()
	if s <= c.issued {
		s = c.issued + 1
	}
	c.issued = s
	// The leader's time is its stamps: a read here after a write it
	// stamped must not see a time before the stamp (its TTL would show a
	// second more than given), which the latest applied stamp, behind by
	// the commit's latency, would.
	if a := c.base.Load(); a == nil || s > c.Now().UnixNano() {
		c.base.Store(&anchor{stamp: s, at: c.mono()})
	}
	return s
}

// Observe takes the latest stamp of a batch of applied entries. A stamp
// within MaxTrustedSkew of this member's clock that is ahead of Now sets
// the time; an older one (written before the last one applied reached
// here, or replayed) leaves it running.
func (c *Clock) Observe(stamp int64) {
	if stamp <= 0 {
		return
	}
	wall := c.wall().UnixNano()
	c.skew.Store(stamp - wall)
	if d := time.Duration(stamp - wall); d > MaxTrustedSkew || d < -MaxTrustedSkew {
		return
	}
	if a := c.base.Load(); a != nil && stamp <= c.Now().UnixNano() {
		return
	}
	c.base.Store(&anchor{stamp: stamp, at: c.mono()})
}

// Skew is how far this member's clock was behind the latest applied stamp
// (negative: ahead). The stamp left the leader a commit earlier, so a few
// milliseconds of it are the log's latency, not the clocks'.
func (c *Clock) Skew() time.Duration { return time.Duration(c.skew.Load()) }
