package raftlog

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestMatchesMemoryStorage runs the same random sequence of writes against a
// Log and a raft.MemoryStorage and checks after every step that both answer
// every raft.Storage question the same way.
func TestMatchesMemoryStorage(t *testing.T) {
	tests := []struct {
		name        string
		seed        uint64
		steps       int
		opts        Options
		reopenEvery int // reopen the Log every n steps on average; 0 never
		// crashEvery: simulate a power loss every n steps on average, which
		// keeps a random part of what was written and not fsynced (a torn
		// tail), and reopen what is left; 0 never.
		crashEvery int
	}{
		{name: "default options", seed: 1, steps: 1500},
		{name: "tiny tail cache forces disk reads", seed: 2, steps: 1500, opts: Options{TailCacheEntries: 3}},
		{name: "byte-bounded tail cache", seed: 3, steps: 1500, opts: Options{TailCacheBytes: 300}},
		{name: "frequent reopen", seed: 4, steps: 800, reopenEvery: 20},
		{name: "frequent reopen tiny cache", seed: 5, steps: 800, opts: Options{TailCacheEntries: 5}, reopenEvery: 10},
		{name: "small segments", seed: 6, steps: 1500, opts: Options{SegmentBytes: 1024, TailCacheEntries: 4}, reopenEvery: 40},
		{name: "crashes", seed: 7, steps: 800, crashEvery: 8},
		{name: "crashes, small segments", seed: 8, steps: 1500, opts: Options{SegmentBytes: 700, TailCacheEntries: 4}, crashEvery: 10},
		{name: "crashes, one spare", seed: 9, steps: 1000, opts: Options{SegmentBytes: 900, SpareSegments: 1}, crashEvery: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &model{
				t:   t,
				rng: rand.New(rand.NewPCG(tc.seed, 0x6b7664)),
				ms:  raft.NewMemoryStorage(),
				ops: map[string]int{},
			}
			if tc.crashEvery > 0 {
				m.fs, m.dir = vfs.NewCrashableMem(), "/data/raft"
				tc.opts.FS = m.fs
				var err error
				m.l, err = Open(m.dir, nil, tc.opts)
				require.NoError(t, err)
			} else {
				m.l, m.dir = openTest(t, tc.opts)
			}
			for step := range tc.steps {
				m.step = step
				switch r := m.rng.IntN(100); {
				case r < 65:
					m.save()
				case r < 80:
					m.compact()
				case r < 88:
					m.applySnapshot()
				default:
					m.saveHardStateOnly()
				}
				if tc.reopenEvery > 0 && m.rng.IntN(tc.reopenEvery) == 0 {
					require.NoError(t, m.l.Close())
					m.l = reopenTest(t, m.dir, tc.opts)
					m.ops["reopen"]++
				}
				if tc.crashEvery > 0 && m.rng.IntN(tc.crashEvery) == 0 {
					tc.opts.FS = m.crash()
				}
				m.check()
			}
			if tc.crashEvery == 0 {
				// Retired segments are reused or removed: the directory holds
				// the live segments, at most SpareSegments spares and the lock.
				names, err := vfs.Default.List(m.dir)
				require.NoError(t, err)
				names = slices.DeleteFunc(names, func(n string) bool { return n == prepTempName })
				spares := tc.opts.withDefaults().SpareSegments
				require.LessOrEqual(t, len(names), m.l.Stats().Segments+spares+1, "%v", names)
			}
			st := m.l.Stats()
			t.Logf("final: first %d last %d in %d segments, %d entries read from disk since open; ops %v",
				st.FirstIndex, st.LastIndex, st.Segments, st.EntryDiskReads, m.ops)
		})
	}
}

type model struct {
	t    *testing.T
	rng  *rand.Rand
	ms   *raft.MemoryStorage
	l    *Log
	dir  string
	step int
	hs   *pb.HardState // last hard state given to both
	// syncedCommit is the commit index as of the last fsync: a crash may
	// take the log's back to it, no further.
	syncedCommit uint64
	fs           *vfs.MemFS     // in crash mode
	ops          map[string]int // how often each kind of operation ran
}

// crash simulates a power loss that keeps a random part of what was not
// fsynced, reopens the log on what is left and returns that filesystem.
// Everything must survive but a commit index moved without fsync.
func (m *model) crash() *vfs.MemFS {
	keep := m.rng.IntN(101)
	m.fs = m.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: rand.New(rand.NewPCG(m.rng.Uint64(), 0))})
	require.NoError(m.t, m.l.Close())
	var err error
	opts := Options{FS: m.fs, SegmentBytes: m.l.segmentBytes, SpareSegments: m.l.maxSpares, TailCacheEntries: m.l.cache.maxEntries, TailCacheBytes: m.l.cache.maxBytes}
	m.l, err = Open(m.dir, nil, opts)
	require.NoError(m.t, err, "step %d: reopen after a crash keeping %d%% of unsynced data", m.step, keep)
	hs, _, err := m.l.InitialState()
	require.NoError(m.t, err)
	require.GreaterOrEqual(m.t, hs.GetCommit(), m.syncedCommit, "step %d: synced commit index lost", m.step)
	require.LessOrEqual(m.t, hs.GetCommit(), m.hs.GetCommit(), "step %d", m.step)
	if hs.GetCommit() != m.hs.GetCommit() {
		m.hs = hardState(m.hs.GetTerm(), m.hs.GetVote(), hs.GetCommit())
		require.NoError(m.t, m.ms.SetHardState(m.hs))
		m.ops["crash lost an unsynced commit"]++
	}
	m.ops["crash"]++
	return m.fs
}

func (m *model) bounds() (first, last uint64) {
	first, err := m.ms.FirstIndex()
	require.NoError(m.t, err)
	last, err = m.ms.LastIndex()
	require.NoError(m.t, err)
	return first, last
}

func (m *model) msTerm(i uint64) uint64 {
	term, err := m.ms.Term(i)
	require.NoError(m.t, err, "step %d: model term %d", m.step, i)
	return term
}

// save appends a random batch that starts anywhere from a little below
// FirstIndex to LastIndex+1 (so it may overwrite a tail), never shrinking
// the log below the commit index, sometimes with a new hard state.
func (m *model) save() {
	first, last := m.bounds()
	commit := m.hs.GetCommit()
	var start uint64
	if first > 1 && m.rng.IntN(10) == 0 {
		start = first - 1 - m.rng.Uint64N(min(first-1, 3)) // partly compacted batch
		m.ops["save below first"]++
	} else {
		lo := max(first, commit+1)
		start = lo + m.rng.Uint64N(last+2-lo)
	}
	n := 1 + m.rng.Uint64N(8)
	if start+n-1 < commit {
		n = commit - start + 1
	}
	term := m.msTerm(max(start, first) - 1)
	var ents []*pb.Entry
	for i := start; i < start+n; i++ {
		if m.rng.IntN(5) == 0 {
			term += 1 + m.rng.Uint64N(2)
		}
		data := make([]byte, m.rng.IntN(120))
		for j := range data {
			data[j] = byte(m.rng.Uint32())
		}
		ents = append(ents, &pb.Entry{Index: new(i), Term: new(term), Data: data})
	}
	var hs *pb.HardState
	if m.rng.IntN(2) == 0 {
		newLast := start + n - 1
		c := commit + m.rng.Uint64N(newLast-commit+1)
		hs = hardState(max(term, m.hs.GetTerm()), m.rng.Uint64N(4), c)
	}
	switch {
	case start <= last && start+n-1 < last:
		m.ops["save overwrite shrinking"]++
	case start <= last:
		m.ops["save overwrite"]++
	default:
		m.ops["save append"]++
	}
	require.NoError(m.t, m.ms.Append(ents))
	if hs != nil {
		require.NoError(m.t, m.ms.SetHardState(hs))
		m.hs = hs
	}
	prev := m.hs
	require.NoError(m.t, m.l.Save(hs, ents), "step %d: save %d..%d", m.step, start, start+n-1)
	m.saved(prev, start+n-1 >= first)
}

// saved notes the commit index made durable by a Save that had entries
// beyond the compaction point or not, given the hard state before it.
func (m *model) saved(prev *pb.HardState, entries bool) {
	if entries || m.hs.GetTerm() != prev.GetTerm() || m.hs.GetVote() != prev.GetVote() {
		m.syncedCommit = m.hs.GetCommit()
	}
}

func (m *model) saveHardStateOnly() {
	_, last := m.bounds()
	commit := m.hs.GetCommit()
	hs := hardState(m.hs.GetTerm()+m.rng.Uint64N(2), m.rng.Uint64N(4), commit+m.rng.Uint64N(last-commit+1))
	if m.rng.IntN(2) == 0 {
		// Commit only: written without fsync, so a crash may tear it.
		hs = hardState(m.hs.GetTerm(), m.hs.GetVote(), hs.GetCommit())
	}
	require.NoError(m.t, m.ms.SetHardState(hs))
	prev := m.hs
	m.hs = hs
	require.NoError(m.t, m.l.Save(hs, nil))
	m.saved(prev, false)
}

// compact compacts to a random committed index, or tries an index at or
// below the compaction point, which both must refuse.
func (m *model) compact() {
	first, _ := m.bounds()
	commit := m.hs.GetCommit()
	if m.rng.IntN(8) == 0 {
		idx := m.rng.Uint64N(first)
		require.ErrorIs(m.t, m.ms.Compact(idx), raft.ErrCompacted)
		require.ErrorIs(m.t, m.l.Compact(idx, nil), raft.ErrCompacted, "step %d", m.step)
		m.ops["compact refused"]++
		return
	}
	if commit < first {
		return
	}
	idx := first + m.rng.Uint64N(commit-first+1)
	var cs *pb.ConfState
	if m.rng.IntN(2) == 0 {
		cs = confState(1 + m.rng.Uint64N(5))
	}
	_, err := m.ms.CreateSnapshot(idx, cs, nil)
	require.NoError(m.t, err)
	require.NoError(m.t, m.ms.Compact(idx))
	require.NoError(m.t, m.l.Compact(idx, cs), "step %d: compact %d", m.step, idx)
	m.syncedCommit = m.hs.GetCommit()
	m.ops["compact"]++
}

// applySnapshot installs a snapshot beyond the commit index (as raft does),
// followed by the hard state the caller would save; or tries an outdated
// one, which both must refuse.
func (m *model) applySnapshot() {
	first, last := m.bounds()
	if first > 1 && m.rng.IntN(5) == 0 {
		meta := snapMeta(1+m.rng.Uint64N(first-1), 1, confState(1))
		require.ErrorIs(m.t, m.ms.ApplySnapshot(&pb.Snapshot{Metadata: meta}), raft.ErrSnapOutOfDate)
		require.ErrorIs(m.t, m.l.ApplySnapshot(meta), raft.ErrSnapOutOfDate, "step %d", m.step)
		m.ops["snapshot refused"]++
		return
	}
	idx := m.hs.GetCommit() + 1 + m.rng.Uint64N(last+5-m.hs.GetCommit())
	idx = max(idx, first)
	term := m.msTerm(last) + m.rng.Uint64N(2)
	meta := snapMeta(idx, term, confState(1, 2, 1+m.rng.Uint64N(5)))
	require.NoError(m.t, m.ms.ApplySnapshot(&pb.Snapshot{Metadata: meta}))
	require.NoError(m.t, m.l.ApplySnapshot(meta), "step %d: apply snapshot %d", m.step, idx)
	m.ops["snapshot"]++
	hs := hardState(max(term, m.hs.GetTerm()), m.hs.GetVote(), idx)
	require.NoError(m.t, m.ms.SetHardState(hs))
	prev := m.hs
	m.hs = hs
	require.NoError(m.t, m.l.Save(hs, nil))
	// The snapshot itself was synced, and InitialState never answers a
	// commit index below it.
	m.syncedCommit = max(m.syncedCommit, idx)
	m.saved(prev, false)
}

// check compares every answer of the Log with the model's.
func (m *model) check() {
	t := m.t
	msg := fmt.Sprintf("step %d", m.step)
	first, last := m.bounds()
	gotFirst, err := m.l.FirstIndex()
	require.NoError(t, err)
	require.Equal(t, first, gotFirst, msg)
	gotLast, err := m.l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, last, gotLast, msg)

	for i := first - min(first, 3); i <= last+2; i++ {
		want, wantErr := m.ms.Term(i)
		got, gotErr := m.l.Term(i)
		require.True(t, sameErr(wantErr, gotErr), "%s: Term(%d) error: want %v, got %v", msg, i, wantErr, gotErr)
		require.Equal(t, want, got, "%s: Term(%d)", msg, i)
	}

	for range 4 {
		lo := first + m.rng.Uint64N(last-first+2)
		hi := lo + m.rng.Uint64N(last+2-lo)
		maxSize := [...]uint64{0, 50, 200, 1000, ^uint64(0)}[m.rng.IntN(5)]
		want, wantErr := m.ms.Entries(lo, hi, maxSize)
		got, gotErr := m.l.Entries(lo, hi, maxSize)
		require.True(t, sameErr(wantErr, gotErr), "%s: Entries(%d, %d, %d) error: want %v, got %v", msg, lo, hi, maxSize, wantErr, gotErr)
		requireEntriesEqual(t, want, got)
	}
	if first > 1 {
		_, err := m.l.Entries(first-1, last+1, ^uint64(0))
		require.ErrorIs(t, err, raft.ErrCompacted, msg)
	}

	wantSnap, err := m.ms.Snapshot()
	require.NoError(t, err)
	gotSnap, err := m.l.Snapshot()
	require.NoError(t, err)
	require.Equal(t, wantSnap.GetMetadata().GetIndex(), gotSnap.GetMetadata().GetIndex(), msg)
	require.Equal(t, wantSnap.GetMetadata().GetTerm(), gotSnap.GetMetadata().GetTerm(), msg)
	requireConfStateEqual(t, wantSnap.GetMetadata().GetConfState(), gotSnap.GetMetadata().GetConfState())
	require.Nil(t, gotSnap.GetData())

	wantHS, wantCS, err := m.ms.InitialState()
	require.NoError(t, err)
	gotHS, gotCS, err := m.l.InitialState()
	require.NoError(t, err)
	require.Equal(t, wantHS.GetTerm(), gotHS.GetTerm(), msg)
	require.Equal(t, wantHS.GetVote(), gotHS.GetVote(), msg)
	require.Equal(t, wantHS.GetCommit(), gotHS.GetCommit(), msg)
	requireConfStateEqual(t, wantCS, gotCS)
}
