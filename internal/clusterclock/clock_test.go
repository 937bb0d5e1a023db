package clusterclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// fakeClocks drive a Clock by hand: wall is the host clock (skewable),
// mono the elapsed time.
type fakeClocks struct{ wall, mono time.Time }

func newTestClock(wall time.Time) (*Clock, *fakeClocks) {
	f := &fakeClocks{wall: wall, mono: time.Unix(1000, 0)}
	c := New(func() time.Time { return f.wall })
	c.mono = func() time.Time { return f.mono }
	return c, f
}

func (f *fakeClocks) advance(d time.Duration) { f.wall, f.mono = f.wall.Add(d), f.mono.Add(d) }

var t0 = time.Unix(1_800_000_000, 0)

func TestNowFollowsAppliedStamps(t *testing.T) {
	tests := []struct {
		name  string
		skew  time.Duration // this member's clock minus the leader's
		stamp time.Time     // what the leader stamped, applied now
		after time.Duration // elapsed since
		want  time.Time
	}{
		{"clock in step", 0, t0, time.Second, t0.Add(time.Second)},
		{"clock 20s behind: the log's time", -20 * time.Second, t0, time.Second, t0.Add(time.Second)},
		{"clock 20s ahead: the log's time", 20 * time.Second, t0, time.Second, t0.Add(time.Second)},
		{"idle for an hour: elapsed time carries it", -20 * time.Second, t0, time.Hour, t0.Add(time.Hour)},
		{"skew past the trusted bound: own clock", -time.Minute, t0, time.Second, t0.Add(-time.Minute + time.Second)},
		{"a replayed stamp an hour old: own clock", 0, t0.Add(-time.Hour), time.Second, t0.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := newTestClock(t0.Add(tt.skew))
			c.Observe(tt.stamp.UnixNano())
			f.advance(tt.after)
			assert.Equal(t, tt.want.UnixNano(), c.Now().UnixNano())
			assert.Equal(t, tt.stamp.Sub(t0.Add(tt.skew)), c.Skew())
		})
	}
}

func TestNowNeverGoesBack(t *testing.T) {
	c, f := newTestClock(t0)
	c.Observe(t0.UnixNano())
	f.advance(time.Second)
	// A stamp taken before the last one reached here (another proposer's,
	// or the log's latency) does not pull the time back.
	c.Observe(t0.Add(500 * time.Millisecond).UnixNano())
	assert.Equal(t, t0.Add(time.Second).UnixNano(), c.Now().UnixNano())
	// A later one moves it forward.
	c.Observe(t0.Add(3 * time.Second).UnixNano())
	assert.Equal(t, t0.Add(3*time.Second).UnixNano(), c.Now().UnixNano())
}

func TestStamp(t *testing.T) {
	t.Run("a leader in step stamps its clock", func(t *testing.T) {
		c, _ := newTestClock(t0)
		assert.Equal(t, t0.UnixNano(), c.Stamp())
	})
	t.Run("a leader behind carries on from the log's time", func(t *testing.T) {
		c, f := newTestClock(t0.Add(-10 * time.Second))
		c.Observe(t0.UnixNano())
		f.advance(time.Second)
		assert.Equal(t, t0.Add(time.Second).UnixNano(), c.Stamp())
	})
	t.Run("a leader ahead moves the time forward", func(t *testing.T) {
		c, _ := newTestClock(t0.Add(10 * time.Second))
		c.Observe(t0.UnixNano())
		assert.Equal(t, t0.Add(10*time.Second).UnixNano(), c.Stamp())
	})
	t.Run("after a stamp the leader's time is not before it", func(t *testing.T) {
		c, f := newTestClock(t0)
		c.Observe(t0.UnixNano())
		f.mono = f.mono.Add(50 * time.Millisecond) // applied 50ms after it was stamped
		f.wall = f.wall.Add(100 * time.Millisecond)
		s := c.Stamp()
		assert.GreaterOrEqual(t, c.Now().UnixNano(), s)
	})
	t.Run("stamps strictly increase on a stopped clock", func(t *testing.T) {
		c, _ := newTestClock(t0)
		a, b := c.Stamp(), c.Stamp()
		assert.Greater(t, b, a)
	})
}
