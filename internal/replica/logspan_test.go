package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLogSpan(t *testing.T) {
	type batch struct {
		index uint64
		bytes int
	}
	tests := []struct {
		name      string
		batches   []batch
		compacted uint64 // 0: no compaction
		since     uint64
		durable   uint64
		keep      uint64
		keepFrom  uint64
	}{
		{name: "empty", durable: 10, keep: 100, keepFrom: 0},
		{name: "all fit", batches: []batch{{5, 10}, {9, 10}}, since: 20, durable: 9, keep: 100, keepFrom: 0},
		{name: "exactly fit", batches: []batch{{5, 50}, {9, 50}}, since: 100, durable: 9, keep: 100, keepFrom: 0},
		{name: "keep the newest",
			batches: []batch{{5, 100}, {9, 100}, {12, 100}, {20, 100}},
			since:   400, durable: 20, keep: 150, keepFrom: 12},
		{name: "keep nothing of a huge batch",
			batches: []batch{{5, 10}, {9, 1000}},
			since:   1010, durable: 9, keep: 100, keepFrom: 9},
		{name: "durable below the newest mark",
			batches: []batch{{5, 100}, {9, 100}, {12, 100}},
			since:   300, durable: 9, keep: 100, keepFrom: 5},
		{name: "after a compaction",
			batches:   []batch{{5, 100}, {9, 100}, {12, 100}, {20, 100}},
			compacted: 10, since: 200, durable: 20, keep: 100, keepFrom: 12},
		{name: "after a compaction, what is left fits",
			batches:   []batch{{5, 100}, {9, 100}, {12, 100}, {20, 100}},
			compacted: 9, since: 200, durable: 20, keep: 200, keepFrom: 0},
		{name: "durable below every mark left",
			batches:   []batch{{5, 100}, {9, 100}, {12, 100}},
			compacted: 9, since: 100, durable: 10, keep: 0, keepFrom: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s logSpan
			for _, b := range tt.batches {
				s.applied(b.index, b.bytes)
			}
			if tt.compacted != 0 {
				s.compacted(tt.compacted)
			}
			require.Equal(t, tt.since, s.since())
			require.Equal(t, tt.keepFrom, s.keepFrom(tt.durable, tt.keep))
		})
	}
	var s logSpan
	s.applied(7, 10)
	s.reset()
	require.Zero(t, s.since())
	require.Zero(t, s.keepFrom(7, 0))
}

// TestLogSpanCompactsOncePerDurableMove drives the span as the Ready loop
// does while the state store's flushes lag far behind the applied index:
// every apply asks where to compact, and the answer may move only when the
// durable index does. It once moved one apply batch further on every apply,
// each move a compaction and an fsync of the raft log.
func TestLogSpanCompactsOncePerDurableMove(t *testing.T) {
	const (
		entry = 8 << 10
		batch = 4 // entries per apply
		keep  = 64 * entry
		step  = 96 // entries the store makes durable at a time
		lag   = 2 * step
	)
	var s logSpan
	var applied, durable, compactedTo uint64
	compactions, moves := 0, 0
	for range 2000 {
		applied += batch
		s.applied(applied, batch*entry)
		// The store's flushes complete in steps, well behind the apply.
		if applied > lag {
			if d := (applied - lag) / step * step; d > durable {
				durable = d
				moves++
			}
		}
		idx := s.keepFrom(durable, keep)
		if idx == 0 {
			continue
		}
		require.Greater(t, idx, compactedTo, "compaction point moved back")
		require.LessOrEqual(t, idx, durable)
		s.compacted(idx)
		compactedTo = idx
		compactions++
		// What the log keeps behind the durable index is bounded by keep
		// (plus a batch, the granularity of the marks).
		require.LessOrEqual(t, (durable-compactedTo)*entry, uint64(keep+batch*entry))
	}
	require.Positive(t, moves)
	require.Positive(t, compactions, "the log was never compacted")
	require.LessOrEqual(t, compactions, moves, "compacted %d times for %d moves of the durable index", compactions, moves)
}
