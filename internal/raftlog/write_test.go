package raftlog

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func TestCompact(t *testing.T) {
	tests := []struct {
		name      string
		index     uint64
		cs        *pb.ConfState
		wantErrIs error // nil: success
		wantErr   bool
		wantCS    *pb.ConfState
		wantTerm  uint64
	}{
		{name: "to the middle, new conf state", index: 7, cs: confState(1, 2, 3), wantCS: confState(1, 2, 3), wantTerm: 2},
		{name: "nil conf state keeps the previous one", index: 5, wantCS: confState(1), wantTerm: 1},
		{name: "to the commit index", index: 8, cs: confState(4), wantCS: confState(4), wantTerm: 2},
		{name: "at the compaction point", index: 3, wantErrIs: raft.ErrCompacted},
		{name: "below the compaction point", index: 1, wantErrIs: raft.ErrCompacted},
		{name: "beyond the last index", index: 11, wantErr: true},
		{name: "beyond the commit index", index: 9, wantErr: true},
	}
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					l, dir := newLog10(t, v.opts)
					require.NoError(t, l.Save(hardState(2, 1, 8), nil))
					before := captureState(t, l)
					compactions := l.Stats().Compactions
					err := l.Compact(tc.index, tc.cs)
					switch {
					case tc.wantErrIs != nil:
						require.ErrorIs(t, err, tc.wantErrIs)
						requireSameState(t, before, captureState(t, l))
						require.Equal(t, compactions, l.Stats().Compactions)
						return
					case tc.wantErr:
						require.Error(t, err)
						requireSameState(t, before, captureState(t, l))
						require.Equal(t, compactions, l.Stats().Compactions)
						return
					}
					require.NoError(t, err)
					require.Equal(t, compactions+1, l.Stats().Compactions)
					check := func(l *Log) {
						first, err := l.FirstIndex()
						require.NoError(t, err)
						require.Equal(t, tc.index+1, first)
						term, err := l.Term(tc.index)
						require.NoError(t, err)
						require.Equal(t, tc.wantTerm, term, "Term(FirstIndex-1)")
						_, err = l.Term(tc.index - 1)
						require.Equal(t, raft.ErrCompacted, err)
						_, err = l.Entries(tc.index, 11, ^uint64(0))
						require.Equal(t, raft.ErrCompacted, err)
						snap, err := l.Snapshot()
						require.NoError(t, err)
						require.Equal(t, tc.index, snap.GetMetadata().GetIndex())
						require.Equal(t, tc.wantTerm, snap.GetMetadata().GetTerm())
						requireConfStateEqual(t, tc.wantCS, snap.GetMetadata().GetConfState())
						_, cs, err := l.InitialState()
						require.NoError(t, err)
						requireConfStateEqual(t, tc.wantCS, cs)
						require.LessOrEqual(t, l.Stats().TailCacheEntries, int(10-tc.index), "compacted entries left in the tail cache")
						_, err = l.Entries(tc.index+1, 11, ^uint64(0))
						require.NoError(t, err)
					}
					check(l)
					require.NoError(t, l.Close())
					check(reopenTest(t, dir, v.opts))
				})
			}
		})
	}
}

func TestApplySnapshot(t *testing.T) {
	tests := []struct {
		name    string
		commit  uint64 // saved before, if not 0
		meta    *pb.SnapshotMetadata
		wantErr error
	}{
		{name: "beyond the last index", meta: snapMeta(20, 4, confState(1, 2))},
		{name: "inside the log", meta: snapMeta(6, 2, confState(1, 2))},
		{name: "just above the compaction point", meta: snapMeta(4, 1, confState(2))},
		{name: "at the compaction point", meta: snapMeta(3, 1, confState(1)), wantErr: raft.ErrSnapOutOfDate},
		{name: "below the compaction point", meta: snapMeta(2, 1, confState(1)), wantErr: raft.ErrSnapOutOfDate},
		{name: "index zero", meta: snapMeta(0, 0, confState(1)), wantErr: raft.ErrSnapOutOfDate},
		{name: "below the commit index", commit: 8, meta: snapMeta(7, 2, confState(1)), wantErr: raft.ErrSnapOutOfDate},
		{name: "at the commit index", commit: 8, meta: snapMeta(8, 2, confState(1))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, dir := newLog10(t, Options{})
			if tc.commit != 0 {
				require.NoError(t, l.Save(hardState(2, 1, tc.commit), nil))
			}
			before := captureState(t, l)
			err := l.ApplySnapshot(tc.meta)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				requireSameState(t, before, captureState(t, l))
				return
			}
			require.NoError(t, err)
			idx := tc.meta.GetIndex()
			check := func(l *Log) {
				st := captureState(t, l)
				require.Equal(t, idx+1, st.first)
				require.Equal(t, idx, st.last)
				require.Empty(t, st.ents)
				require.Equal(t, idx, st.snap.GetIndex())
				require.Equal(t, tc.meta.GetTerm(), st.snap.GetTerm())
				requireConfStateEqual(t, tc.meta.GetConfState(), st.snap.GetConfState())
				requireConfStateEqual(t, tc.meta.GetConfState(), st.cs)
				require.Equal(t, uint64(2), st.hs.GetTerm(), "hard state untouched")
				term, err := l.Term(idx)
				require.NoError(t, err)
				require.Equal(t, tc.meta.GetTerm(), term)
				_, err = l.Term(idx + 1)
				require.Equal(t, raft.ErrUnavailable, err)
			}
			check(l)
			require.NoError(t, l.Save(nil, entries(idx+1, idx+2, 5)))
			require.NoError(t, l.Close())
			l = reopenTest(t, dir, Options{})
			got, err := l.Entries(idx+1, idx+3, ^uint64(0))
			require.NoError(t, err)
			require.Equal(t, span(idx+1, idx+2), indexes(got))
		})
	}
}

// A crash between ApplySnapshot and the Save of the hard state that follows
// leaves a commit index below the snapshot; raft would refuse it, so
// InitialState answers the snapshot index.
func TestInitialStateRaisesCommitToCompactionPoint(t *testing.T) {
	l, dir := newLog10(t, Options{})
	require.NoError(t, l.ApplySnapshot(snapMeta(20, 4, confState(1))))
	require.NoError(t, l.Close())
	l = reopenTest(t, dir, Options{})
	hs, _, err := l.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(20), hs.GetCommit())
	require.Equal(t, uint64(2), hs.GetTerm())
	require.Equal(t, uint64(1), hs.GetVote())
}

func TestBootstrap(t *testing.T) {
	tests := []struct {
		name    string
		before  func(t *testing.T, l *Log)
		wantErr bool
	}{
		{name: "fresh log"},
		{name: "twice", before: func(t *testing.T, l *Log) { require.NoError(t, l.Bootstrap(confState(1))) }, wantErr: true},
		{name: "after entries", before: func(t *testing.T, l *Log) { require.NoError(t, l.Save(nil, entries(1, 1, 1))) }, wantErr: true},
		{name: "after hard state", before: func(t *testing.T, l *Log) { require.NoError(t, l.Save(hardState(1, 1, 0), nil)) }, wantErr: true},
		{name: "after snapshot", before: func(t *testing.T, l *Log) { require.NoError(t, l.ApplySnapshot(snapMeta(5, 1, confState(1)))) }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, dir := openTest(t, Options{})
			require.True(t, l.IsEmpty())
			if tc.before != nil {
				tc.before(t, l)
				require.False(t, l.IsEmpty())
			}
			err := l.Bootstrap(confState(1, 2, 3))
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.False(t, l.IsEmpty())
			require.NoError(t, l.Close())

			l = reopenTest(t, dir, Options{})
			require.False(t, l.IsEmpty())
			hs, cs, err := l.InitialState()
			require.NoError(t, err)
			require.True(t, isEmptyHardState(hs))
			requireConfStateEqual(t, confState(1, 2, 3), cs)
			first, _ := l.FirstIndex()
			last, _ := l.LastIndex()
			require.Equal(t, uint64(1), first)
			require.Equal(t, uint64(0), last)
			term, err := l.Term(0)
			require.NoError(t, err)
			require.Equal(t, uint64(0), term)
		})
	}
}

// Reopening a closed log gives back everything it answered before.
func TestReopenReturnsSameState(t *testing.T) {
	tests := []struct {
		name  string
		build func(t *testing.T, l *Log)
	}{
		{name: "fresh", build: func(t *testing.T, l *Log) {}},
		{name: "bootstrapped", build: func(t *testing.T, l *Log) {
			require.NoError(t, l.Bootstrap(confState(1, 2, 3)))
		}},
		{name: "entries and hard state", build: func(t *testing.T, l *Log) {
			require.NoError(t, l.Bootstrap(confState(1)))
			require.NoError(t, l.Save(hardState(1, 1, 0), entries(1, 50, 1)))
			require.NoError(t, l.Save(hardState(2, 1, 40), entries(51, 60, 2)))
		}},
		{name: "overwritten tail", build: func(t *testing.T, l *Log) {
			require.NoError(t, l.Bootstrap(confState(1)))
			require.NoError(t, l.Save(hardState(1, 1, 5), entries(1, 20, 1)))
			require.NoError(t, l.Save(hardState(3, 2, 5), entries(8, 10, 3)))
		}},
		{name: "compacted", build: func(t *testing.T, l *Log) {
			require.NoError(t, l.Bootstrap(confState(1)))
			require.NoError(t, l.Save(hardState(1, 1, 30), entries(1, 40, 1)))
			require.NoError(t, l.Compact(30, confState(1, 2)))
		}},
		{name: "compacted to last", build: func(t *testing.T, l *Log) {
			require.NoError(t, l.Bootstrap(confState(1)))
			require.NoError(t, l.Save(hardState(1, 1, 40), entries(1, 40, 1)))
			require.NoError(t, l.Compact(40, nil))
		}},
		{name: "snapshot then entries", build: func(t *testing.T, l *Log) {
			require.NoError(t, l.Save(hardState(1, 1, 3), entries(1, 3, 1)))
			require.NoError(t, l.ApplySnapshot(snapMeta(100, 7, confState(1, 2, 3))))
			require.NoError(t, l.Save(hardState(7, 2, 101), entries(101, 105, 7)))
		}},
	}
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					l, dir := openTest(t, v.opts)
					tc.build(t, l)
					want := captureState(t, l)
					require.NoError(t, l.Close())
					got := captureState(t, reopenTest(t, dir, v.opts))
					requireSameState(t, want, got)
				})
			}
		})
	}
}

func TestClosedLog(t *testing.T) {
	l, _ := newLog10(t, Options{})
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "second Close")
	_, _, err := l.InitialState()
	require.ErrorIs(t, err, ErrClosed)
	_, err = l.Entries(4, 5, 0)
	require.ErrorIs(t, err, ErrClosed)
	_, err = l.Term(4)
	require.ErrorIs(t, err, ErrClosed)
	_, err = l.FirstIndex()
	require.ErrorIs(t, err, ErrClosed)
	_, err = l.LastIndex()
	require.ErrorIs(t, err, ErrClosed)
	_, err = l.Snapshot()
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, l.Save(nil, entries(11, 11, 2)), ErrClosed)
	require.ErrorIs(t, l.Compact(5, nil), ErrClosed)
	require.ErrorIs(t, l.ApplySnapshot(snapMeta(20, 2, nil)), ErrClosed)
	require.ErrorIs(t, l.Bootstrap(confState(1)), ErrClosed)
	st := l.Stats()
	require.Zero(t, st.DiskBytes)
	require.Equal(t, uint64(10), st.LastIndex)
}

// Stats may be called from any goroutine while the raft goroutine writes;
// run with -race.
func TestStatsFromAnotherGoroutine(t *testing.T) {
	l, _ := openTest(t, Options{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				st := l.Stats()
				if st.LastIndex >= st.FirstIndex {
					assert.LessOrEqual(t, st.TailCacheEntries, int(st.LastIndex-st.FirstIndex+1))
				}
			}
		}
	})
	for i := uint64(1); i <= 50; i++ {
		require.NoError(t, l.Save(hardState(1, 1, i-1), entries(i, i, 1)))
		if i%10 == 0 {
			require.NoError(t, l.Compact(i-5, nil))
		}
	}
	close(done)
	wg.Wait()
	st := l.Stats()
	require.Equal(t, uint64(46), st.FirstIndex)
	require.Equal(t, uint64(50), st.LastIndex)
	// 50 saves, 5 compactions, the first segment's header; and two for
	// each move to a new segment (seal, header), which the log makes as soon
	// as a prefilled spare is ready.
	require.Equal(t, uint64(50+5+1+2*(l.segs[len(l.segs)-1].seq-1)), st.SyncCount)
	require.Positive(t, st.SyncDuration)
	require.Positive(t, st.DiskBytes)
}

func TestOptions(t *testing.T) {
	require.NoError(t, Options{}.Validate())
	require.NoError(t, DefaultOptions().Validate())
	err := Options{SegmentBytes: -1, SpareSegments: -1, TailCacheEntries: -1, TailCacheBytes: -1}.Validate()
	require.ErrorContains(t, err, "SegmentBytes")
	require.ErrorContains(t, err, "SpareSegments")
	require.ErrorContains(t, err, "TailCacheEntries")
	require.ErrorContains(t, err, "TailCacheBytes")
	_, err = Open(t.TempDir(), nil, Options{TailCacheEntries: -1})
	require.ErrorContains(t, err, "TailCacheEntries")

	d := DefaultOptions()
	require.Equal(t, d, Options{}.withDefaults())
}

// A follower with a long divergent tail receives a snapshot below it, in
// small segments, compacts as its tail is overwritten by later terms, and
// is reopened: every reopen answers the same.
func TestDivergentTailThenSnapshotAcrossSegments(t *testing.T) {
	opts := Options{SegmentBytes: 700, SpareSegments: 1, TailCacheEntries: 3}
	l, dir := openTest(t, opts)
	require.NoError(t, l.Bootstrap(confState(1)))
	for i := uint64(1); i <= 200; i += 5 {
		require.NoError(t, l.Save(hardState(1, 1, min(i-1, 50)), entries(i, i+4, 1)))
	}
	require.NoError(t, l.Compact(40, nil))
	require.NoError(t, l.ApplySnapshot(snapMeta(150, 2, confState(1, 2))))
	require.NoError(t, l.Save(hardState(2, 2, 150), nil))
	// Conflicts: every 50 entries a new term overwrites the last 3, crossing segments.
	term, next, commit := uint64(2), uint64(151), uint64(150)
	for next <= 400 {
		require.NoError(t, l.Save(hardState(term, 2, commit), entries(next, next+4, term)))
		next += 5
		if next%50 == 1 {
			term++
			next -= 3
			require.NoError(t, l.Save(hardState(term, 2, commit), entries(next, next+1, term)))
			next += 2
		}
		commit = next - 6
		require.NoError(t, l.Save(hardState(term, 2, commit), nil))
		if commit%20 == 0 {
			require.NoError(t, l.Compact(commit-5, nil))
		}
	}
	want := captureState(t, l)
	require.Greater(t, want.first, uint64(150), "the log compacted past the snapshot")
	require.Greater(t, want.hs.GetTerm(), uint64(2), "later terms overwrote the tail")
	for range 4 {
		require.NoError(t, l.Close())
		l = reopenTest(t, dir, opts)
		requireSameState(t, want, captureState(t, l))
	}
}
