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
		{name: "all fit", batches: []batch{{5, 10}, {9, 10}}, since: 20, durable: 9, keep: 100, keepFrom: 5},
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
