package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --rate R over a case of D seconds schedules R×D operations: the slot that
// falls on the end of the case belongs to the next one, and the clients
// stay until the end so that ops/s is taken over the whole case.
func TestRateScheduleFitsTheCase(t *testing.T) {
	f := startFakeMC(t, nil)
	for _, conc := range []int{1, 2} {
		cfg := testConfig(t, "custom", f.addr())
		cfg.Workload.Preload = false
		cfg.Rate, cfg.Duration, cfg.MaxOps, cfg.Concurrency = 20, 500*time.Millisecond, 1000, []int{conc}
		rep := mustRun(t, cfg)
		r := rep.Cases[0].Runs[0]
		assert.EqualValues(t, 10, r.Ops, "c=%d: ops of 20/s over 0.5 s", conc)
		require.GreaterOrEqual(t, r.ElapsedS, 0.5, "c=%d: the case ends before its duration", conc)
		assert.InDelta(t, 20, r.OpsPerSec, 1, "c=%d: ops/s", conc)
	}
}

// The preload line says sets/s: failed sets are not sets.
func TestPreloadLineCountsOnlyAcknowledgedSets(t *testing.T) {
	rep := &Report{Preload: &RunResult{ElapsedS: 2, OpsPerSec: 100, Records: 200,
		Counts: Counts{Ops: 200, SetTries: 200, Sets: 50, Errors: 150, SetErrors: 150}}}
	var b strings.Builder
	require.NoError(t, WriteText(&b, rep))
	assert.Contains(t, b.String(), "preload: 50 of 200 keys in 2.00s (25 sets/s), 150 errors")
}

// Without --timeline a worker keeps no per-second buckets: they would grow
// by one a second for as long as the run lasts, per worker.
func TestTimelineKeptOnlyWhenAsked(t *testing.T) {
	for _, keep := range []bool{false, true} {
		s := newWorkerStats()
		s.keepTimeline = keep
		start := time.Now()
		op := Op{Kind: OpSet, Key: []byte("k")}
		res := Result{Done: start.Add(time.Hour)}
		s.record(&op, &res, start, start, false)
		s.recordError(OpGet, &OpError{Kind: ErrTimeout}, start.Add(2*time.Hour), start)
		assert.EqualValues(t, 2, s.counts.Ops)
		if keep {
			require.Len(t, s.timeline, 7201)
			assert.Equal(t, timeBucket{Ops: 1, Writes: 1}, s.timeline[3600])
			assert.Equal(t, timeBucket{Ops: 1, Errors: 1}, s.timeline[7200])
		} else {
			assert.Empty(t, s.timeline)
		}
	}
}

// etcd's pipelined requests finish in any order: a write acknowledged
// before the one recorded ahead of it must not reopen an older gap.
func TestWriteGapsWithOutOfOrderAcks(t *testing.T) {
	start := time.Now()
	s := newWorkerStats()
	s.trackGaps, s.lastWrite = true, start
	op := Op{Kind: OpSet, Key: []byte("k")}
	for _, done := range []time.Duration{10 * time.Millisecond, 5 * time.Millisecond, 12 * time.Millisecond} {
		res := Result{Done: start.Add(done)}
		s.record(&op, &res, start, start, false)
	}
	gaps := s.closeGaps(start.Add(12 * time.Millisecond))
	require.Len(t, gaps, 2)
	assert.Equal(t, start.Add(10*time.Millisecond), gaps[0].to)
	assert.Equal(t, start.Add(10*time.Millisecond), gaps[1].from, "the gap runs from the latest write")
	assert.Equal(t, start.Add(12*time.Millisecond), gaps[1].to)
}
