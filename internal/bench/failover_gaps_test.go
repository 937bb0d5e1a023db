package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeEvery records acknowledged sets every step from first on, skipping
// those inside [pauseFrom, pauseTo), up to end: a client writing slower
// than minGap, so that every write ends a gap, with one long pause.
func writeEvery(s *workerStats, start time.Time, first, step, pauseFrom, pauseTo, end time.Duration) {
	op := Op{Kind: OpSet, Key: []byte("k")}
	for at := first; at < end; at += step {
		if at >= pauseFrom && at < pauseTo {
			continue
		}
		res := Result{Done: start.Add(at)}
		s.record(&op, &res, start.Add(at-step/2), start, false)
	}
}

// --failover kept every write gap over minGap: a long run of a client that
// writes every 2 ms (a slow server, or --rate) held one per write. What a
// client keeps must not grow with the run, and the long pause must still
// be found.
func TestWriteGapsKeptAreBounded(t *testing.T) {
	start := time.Now()
	s := newWorkerStats()
	s.trackGaps, s.lastWrite = true, start
	const end = 40 * time.Second // 20,000 writes, each after a 2 ms gap
	writeEvery(s, start, 2*time.Millisecond, 2*time.Millisecond, 20*time.Second, 20*time.Second+700*time.Millisecond, end)
	gaps := s.closeGaps(start.Add(end))
	assert.LessOrEqual(t, len(gaps), 1024, "gaps kept by one client")
	var longest time.Duration
	for _, g := range gaps {
		longest = max(longest, g.to.Sub(g.from))
	}
	assert.Equal(t, 702*time.Millisecond, longest, "the pause, from the write before it to the one after")
}

// The window comes out exact from the gaps kept when no client let go of
// one as long as it, and is flagged as a lower bound otherwise.
func TestFailoverFromKeptGaps(t *testing.T) {
	start := time.Now()
	newStats := func(maxGaps int) *workerStats {
		s := newWorkerStats()
		s.trackGaps, s.lastWrite, s.maxGaps = true, start, maxGaps
		return s
	}
	const end = 40 * time.Second
	pauseFrom, pauseTo := 20*time.Second, 20*time.Second+700*time.Millisecond
	t.Run("exact", func(t *testing.T) {
		a, b := newStats(minGapsKept), newStats(minGapsKept)
		writeEvery(a, start, 2*time.Millisecond, 2*time.Millisecond, pauseFrom, pauseTo, end) // 19.998 s, then 20.700 s
		writeEvery(b, start, 3*time.Millisecond, 2*time.Millisecond, pauseFrom, pauseTo, end) // 19.999 s, then 20.701 s
		f := failoverFrom(start, [][]gap{a.closeGaps(start.Add(end)), b.closeGaps(start.Add(end))}, max(a.droppedMax, b.droppedMax))
		require.NotNil(t, f)
		assert.Equal(t, 701.0, f.LongestGapMs)
		assert.InDelta(t, 19.999, f.GapStartS, 1e-9)
		assert.True(t, f.Recovered)
		assert.False(t, f.AtLeast, "every gap let go was shorter than the window")
	})
	t.Run("lower bound", func(t *testing.T) {
		// a writes every 10 ms and keeps 4 of its gaps, the first four;
		// b writes every 0.5 ms but for one pause of 8 ms at 0.5 s, inside
		// one of a's gaps that a let go.
		a, b := newStats(4), newStats(4)
		writeEvery(a, start, 10*time.Millisecond, 10*time.Millisecond, 0, 0, time.Second)
		writeEvery(b, start, 500*time.Microsecond, 500*time.Microsecond, 501*time.Millisecond, 509*time.Millisecond, time.Second)
		assert.Len(t, a.closeGaps(start.Add(time.Second)), 5, "the four kept and the open one at the end")
		f := failoverFrom(start, [][]gap{a.closeGaps(start.Add(time.Second)), b.closeGaps(start.Add(time.Second))}, max(a.droppedMax, b.droppedMax))
		require.NotNil(t, f, "a window may exist in the gaps let go")
		assert.True(t, f.AtLeast)
		assert.Zero(t, f.LongestGapMs)
		var out strings.Builder
		writeFailover(&out, CaseResult{Phase: "run", Concurrency: 2}, RunResult{Repeat: 1, Failover: f})
		assert.Contains(t, out.String(), "not determined")
	})
	t.Run("none", func(t *testing.T) {
		a := newStats(4)
		writeEvery(a, start, 500*time.Microsecond, 500*time.Microsecond, 0, 0, time.Second)
		assert.Nil(t, failoverFrom(start, [][]gap{a.closeGaps(start.Add(time.Second))}, a.droppedMax))
	})
}
