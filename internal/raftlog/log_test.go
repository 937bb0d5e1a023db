package raftlog

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// cacheVariants runs a test against a log whose recent entries are all in
// the tail cache and against one that must read nearly all from Pebble.
var cacheVariants = []struct {
	name string
	opts Options
}{
	{"tail cache", Options{}},
	{"disk", Options{TailCacheEntries: 1}},
}

// newLog10 returns a log holding entries 1..10 (terms 1..5 then 6..10 term 2)
// compacted at 3, with hard state term 2 commit 3.
func newLog10(t *testing.T, opts Options) (*Log, string) {
	t.Helper()
	l, dir := openTest(t, opts)
	require.NoError(t, l.Bootstrap(confState(1)))
	require.NoError(t, l.Save(hardState(2, 1, 3), append(entries(1, 5, 1), entries(6, 10, 2)...)))
	require.NoError(t, l.Compact(3, nil))
	return l, dir
}

func TestEntries(t *testing.T) {
	size := uint64(proto.Size(entry(4, 1, "data-4-1"))) // all test entries have the same size
	tests := []struct {
		name          string
		lo, hi, limit uint64
		want          []uint64
		wantErr       error
	}{
		{name: "all", lo: 4, hi: 11, limit: ^uint64(0), want: span(4, 10)},
		{name: "middle", lo: 5, hi: 8, limit: ^uint64(0), want: span(5, 7)},
		{name: "last only", lo: 10, hi: 11, limit: ^uint64(0), want: span(10, 10)},
		{name: "empty range", lo: 6, hi: 6, limit: ^uint64(0), want: []uint64{}},
		{name: "maxSize 0 still returns one", lo: 4, hi: 11, limit: 0, want: span(4, 4)},
		{name: "maxSize fits exactly two", lo: 4, hi: 11, limit: 2 * size, want: span(4, 5)},
		{name: "maxSize one byte short of three", lo: 4, hi: 11, limit: 3*size - 1, want: span(4, 5)},
		{name: "maxSize across disk and cache", lo: 4, hi: 11, limit: 5 * size, want: span(4, 8)},
		{name: "compacted lo", lo: 3, hi: 6, limit: ^uint64(0), wantErr: raft.ErrCompacted},
		{name: "long compacted lo", lo: 1, hi: 11, limit: ^uint64(0), wantErr: raft.ErrCompacted},
		{name: "hi beyond last", lo: 4, hi: 12, limit: ^uint64(0), wantErr: raft.ErrUnavailable},
	}
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			l, _ := newLog10(t, v.opts)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					got, err := l.Entries(tc.lo, tc.hi, tc.limit)
					if tc.wantErr != nil {
						// raft compares these sentinels with ==: they must not be wrapped.
						require.Equal(t, tc.wantErr, err)
						return
					}
					require.NoError(t, err)
					require.Equal(t, tc.want, indexes(got))
				})
			}
			_, err := l.Entries(7, 6, ^uint64(0))
			require.Error(t, err, "lo > hi")
		})
	}
}

func TestEntriesOfEmptyLog(t *testing.T) {
	l, _ := openTest(t, Options{})
	_, err := l.Entries(1, 1, ^uint64(0))
	require.Equal(t, raft.ErrUnavailable, err, "fresh log")

	require.NoError(t, l.ApplySnapshot(snapMeta(10, 3, confState(1))))
	_, err = l.Entries(11, 11, ^uint64(0))
	require.Equal(t, raft.ErrUnavailable, err, "after snapshot")
	_, err = l.Entries(10, 11, ^uint64(0))
	require.Equal(t, raft.ErrCompacted, err, "snapshot index itself")
}

// The caller may append to the slice Entries returns without changing what
// the log answers next (raft.Storage contract).
func TestEntriesResultIsSafeToAppendTo(t *testing.T) {
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			l, _ := newLog10(t, v.opts)
			got, err := l.Entries(4, 8, ^uint64(0))
			require.NoError(t, err)
			got = append(got, entry(8, 99, "intruder"))
			got[0] = entry(4, 99, "intruder")
			again, err := l.Entries(4, 11, ^uint64(0))
			require.NoError(t, err)
			require.Equal(t, span(4, 10), indexes(again))
			for _, e := range again {
				require.NotEqual(t, uint64(99), e.GetTerm())
			}
		})
	}
}

func TestTerm(t *testing.T) {
	tests := []struct {
		name    string
		index   uint64
		want    uint64
		wantErr error
	}{
		{name: "before compaction point", index: 2, wantErr: raft.ErrCompacted},
		{name: "zero", index: 0, wantErr: raft.ErrCompacted},
		{name: "compaction point (dummy entry)", index: 3, want: 1},
		{name: "first", index: 4, want: 1},
		{name: "term change", index: 6, want: 2},
		{name: "last", index: 10, want: 2},
		{name: "beyond last", index: 11, wantErr: raft.ErrUnavailable},
	}
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			l, _ := newLog10(t, v.opts)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					got, err := l.Term(tc.index)
					require.Equal(t, tc.wantErr, err)
					require.Equal(t, tc.want, got)
				})
			}
		})
	}
}

func TestSave(t *testing.T) {
	tests := []struct {
		name      string
		commit    uint64 // saved before the test's Save, if not 0
		hs        *pb.HardState
		ents      []*pb.Entry
		wantErr   bool
		wantFirst uint64
		wantLast  uint64
		wantTerms map[uint64]uint64
	}{
		{name: "append", ents: entries(11, 12, 2), wantFirst: 4, wantLast: 12, wantTerms: map[uint64]uint64{10: 2, 12: 2}},
		{name: "replace conflicting tail", ents: entries(9, 9, 3), wantFirst: 4, wantLast: 9, wantTerms: map[uint64]uint64{8: 2, 9: 3}},
		{name: "replace and extend", ents: entries(9, 14, 3), wantFirst: 4, wantLast: 14, wantTerms: map[uint64]uint64{8: 2, 9: 3, 14: 3}},
		{name: "replace from first", ents: entries(4, 5, 2), wantFirst: 4, wantLast: 5, wantTerms: map[uint64]uint64{4: 2, 5: 2}},
		{name: "skip compacted prefix", ents: entries(2, 5, 2), wantFirst: 4, wantLast: 5, wantTerms: map[uint64]uint64{3: 1, 4: 2}},
		{name: "entirely compacted", ents: entries(1, 3, 1), wantFirst: 4, wantLast: 10, wantTerms: map[uint64]uint64{10: 2}},
		{name: "gap", ents: entries(12, 13, 2), wantErr: true},
		{name: "not contiguous", ents: []*pb.Entry{entry(11, 2, ""), entry(13, 2, "")}, wantErr: true},
		{name: "term decreasing in batch", ents: []*pb.Entry{entry(11, 3, ""), entry(12, 2, "")}, wantErr: true},
		{name: "term below predecessor", ents: entries(11, 11, 1), wantErr: true},
		{name: "nil entry", ents: []*pb.Entry{nil}, wantErr: true},
		{name: "truncate below saved commit", commit: 8, ents: entries(6, 7, 3), wantErr: true},
		{name: "truncate below new commit", hs: hardState(3, 1, 8), ents: entries(6, 7, 3), wantErr: true},
		{name: "commit beyond new last", hs: hardState(3, 1, 12), ents: entries(11, 11, 3), wantErr: true},
		{name: "commit at new last", hs: hardState(3, 1, 11), ents: entries(9, 11, 3), wantFirst: 4, wantLast: 11, wantTerms: map[uint64]uint64{8: 2, 9: 3}},
		{name: "hard state only, commit beyond last", hs: hardState(3, 1, 11), wantErr: true},
	}
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					l, dir := newLog10(t, v.opts)
					if tc.commit != 0 {
						require.NoError(t, l.Save(hardState(2, 1, tc.commit), nil))
					}
					before := captureState(t, l)
					err := l.Save(tc.hs, tc.ents)
					if tc.wantErr {
						require.Error(t, err)
						requireSameState(t, before, captureState(t, l))
						return
					}
					require.NoError(t, err)
					requireWants := func(l *Log) {
						first, _ := l.FirstIndex()
						last, _ := l.LastIndex()
						require.Equal(t, tc.wantFirst, first)
						require.Equal(t, tc.wantLast, last)
						for i, want := range tc.wantTerms {
							got, err := l.Term(i)
							require.NoError(t, err)
							require.Equal(t, want, got, "term %d", i)
						}
						_, err = l.Term(tc.wantLast + 1)
						require.Equal(t, raft.ErrUnavailable, err)
					}
					requireWants(l)
					after := captureState(t, l)
					require.NoError(t, l.Close())
					l2 := reopenTest(t, dir, v.opts)
					requireWants(l2)
					requireSameState(t, after, captureState(t, l2))
				})
			}
		})
	}
}
