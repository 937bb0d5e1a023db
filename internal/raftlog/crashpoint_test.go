package raftlog

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// pointFS counts the operations that change a crashable MemFS (writes,
// fsyncs, creates, renames, removals) and, before operation crashAt, takes
// the disk a power loss at that instant leaves; or, before operation failAt,
// fails it with errInjected. Its Preallocate writes zeros, as a prefilled
// spare holds, so that retired segments become spares on a MemFS too. It
// also counts open files, for leak checks.
type pointFS struct {
	*vfs.MemFS
	mu      sync.Mutex
	ops     int
	crashAt int
	failAt  int
	rng     *rand.Rand
	crashed *vfs.MemFS
	open    int
	// unsynced holds the writes to each open file since its last fsync: a
	// crash keeps a random subset of their sectors (a torn write).
	unsynced map[*pointFile][]pendingWrite
}

type pendingWrite struct {
	off int64
	n   int
}

var errInjected = errors.New("injected error")

func newPointFS(mem *vfs.MemFS, crashAt, failAt int, rng *rand.Rand) *pointFS {
	return &pointFS{MemFS: mem, crashAt: crashAt, failAt: failAt, rng: rng, unsynced: map[*pointFile][]pendingWrite{}}
}

// op counts one operation; it crashes or fails it when its turn comes.
func (p *pointFS) op() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ops++
	if p.ops == p.crashAt && p.crashed == nil {
		p.crashed = p.crashClone()
	}
	if p.ops == p.failAt {
		return errInjected
	}
	return nil
}

// crashClone is the disk after a power loss now: what was fsynced, plus
// a random subset of the 512-byte sectors written since. p.mu held.
func (p *pointFS) crashClone() *vfs.MemFS {
	after := p.MemFS.CrashClone(vfs.CrashCloneCfg{})
	// In name order, so that a trial's seed alone decides what survives.
	files := slices.SortedFunc(maps.Keys(p.unsynced), func(a, b *pointFile) int { return strings.Compare(a.name, b.name) })
	for _, f := range files {
		writes := p.unsynced[f]
		g, err := after.OpenReadWrite(f.name, vfs.WriteCategoryUnspecified)
		if err != nil {
			continue // its name did not survive
		}
		for _, w := range writes {
			for s := w.off &^ 511; s < w.off+int64(w.n); s += 512 {
				if p.rng.IntN(2) == 0 {
					continue
				}
				lo, hi := max(s, w.off), min(s+512, w.off+int64(w.n))
				b := make([]byte, hi-lo)
				if _, err := f.File.ReadAt(b, lo); err == nil {
					_, _ = g.WriteAt(b, lo)
				}
			}
		}
		_ = g.Sync()
		_ = g.Close()
	}
	return after
}

func (p *pointFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.open++
	p.mu.Unlock()
	return &pointFile{File: f, fs: p, name: name}, nil
}

func (p *pointFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := p.op(); err != nil {
		return nil, err
	}
	f, err := p.MemFS.Create(name, c)
	return p.wrap(name, f, err)
}

func (p *pointFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := p.MemFS.Open(name, opts...)
	return p.wrap(name, f, err)
}

func (p *pointFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := p.op(); err != nil {
		return nil, err
	}
	f, err := p.MemFS.OpenReadWrite(name, c, opts...)
	return p.wrap(name, f, err)
}

func (p *pointFS) OpenDir(name string) (vfs.File, error) {
	f, err := p.MemFS.OpenDir(name)
	return p.wrap(name, f, err)
}

func (p *pointFS) Rename(oldname, newname string) error {
	if err := p.op(); err != nil {
		return err
	}
	return p.MemFS.Rename(oldname, newname)
}

func (p *pointFS) Remove(name string) error {
	if err := p.op(); err != nil {
		return err
	}
	return p.MemFS.Remove(name)
}

type pointFile struct {
	vfs.File
	fs   *pointFS
	name string
}

func (f *pointFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.fs.op(); err != nil {
		return 0, err
	}
	f.fs.mu.Lock()
	f.fs.unsynced[f] = append(f.fs.unsynced[f], pendingWrite{off: off, n: len(b)})
	f.fs.mu.Unlock()
	return f.File.WriteAt(b, off)
}

func (f *pointFile) Write(b []byte) (int, error) {
	if err := f.fs.op(); err != nil {
		return 0, err
	}
	return f.File.Write(b)
}

func (f *pointFile) Preallocate(off, n int64) error {
	if err := f.fs.op(); err != nil {
		return err
	}
	st, err := f.File.Stat()
	if err != nil {
		return err
	}
	if end := off + n; end > st.Size() {
		_, err = f.File.WriteAt(make([]byte, end-st.Size()), st.Size())
	}
	return err
}

func (f *pointFile) Sync() error {
	if err := f.fs.op(); err != nil {
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.fs.mu.Lock()
	delete(f.fs.unsynced, f)
	f.fs.mu.Unlock()
	return nil
}

func (f *pointFile) SyncData() error { return f.Sync() }

func (f *pointFile) Close() error {
	f.fs.mu.Lock()
	f.fs.open--
	delete(f.fs.unsynced, f)
	f.fs.mu.Unlock()
	return f.File.Close()
}

// mlog is the state a log was acknowledged to hold.
type mlog struct {
	comp, compTerm uint64
	ents           []*pb.Entry // comp+1 ..
	hs             *pb.HardState
}

func (m mlog) last() uint64 { return m.comp + uint64(len(m.ents)) }

func (m mlog) clone() mlog {
	m.ents = append([]*pb.Entry(nil), m.ents...)
	m.hs = proto.Clone(m.hs).(*pb.HardState)
	return m
}

func (m mlog) termAt(i uint64) uint64 {
	if i == m.comp {
		return m.compTerm
	}
	return m.ents[i-m.comp-1].GetTerm()
}

func readMlog(t *testing.T, l *Log) mlog {
	t.Helper()
	m := mlog{comp: l.compaction.GetIndex(), compTerm: l.compaction.GetTerm(), hs: proto.Clone(l.hardState).(*pb.HardState)}
	first, last := m.comp+1, l.lastIndex
	if last >= first {
		ents, err := l.Entries(first, last+1, ^uint64(0))
		require.NoError(t, err)
		m.ents = ents
	}
	for i := first - 1; i <= last; i++ {
		term, err := l.Term(i)
		require.NoError(t, err)
		require.Equal(t, m.termAt(i), term, "Term(%d) disagrees with Entries", i)
	}
	return m
}

// cpWorkload drives a log with random raft-legal writes, keeping the
// state acknowledged before the write under way (prev) and the state after
// it (cur), with the kind of write and, for a Save, its first index.
type cpWorkload struct {
	t         *testing.T
	rng       *rand.Rand
	l         *Log
	prev, cur mlog
	kind      string
	start     uint64
	term      uint64
	// stop reports a crash already taken, between the two writes of a step.
	stop func() bool
}

func (w *cpWorkload) step() {
	w.prev = w.cur.clone()
	c := w.cur
	commit := c.hs.GetCommit()
	switch r := w.rng.IntN(100); {
	case r < 55 || c.last() == c.comp: // append, or replace an uncommitted tail
		start := c.last() + 1
		if w.rng.IntN(4) == 0 && c.last() > max(commit, c.comp) {
			start = max(commit, c.comp) + 1 + w.rng.Uint64N(c.last()-max(commit, c.comp))
			w.term++
		}
		n := 1 + w.rng.Uint64N(6)
		var ents []*pb.Entry
		for i := start; i < start+n; i++ {
			ents = append(ents, entry(i, w.term, fmt.Sprintf("%d-%d-%s", i, w.term, make([]byte, w.rng.IntN(300)))))
		}
		hs := hardState(w.term, 1, min(commit+w.rng.Uint64N(4), start+n-1))
		w.kind, w.start = "save", start
		c.ents = append(c.ents[:start-c.comp-1], ents...)
		c.hs = hs
		w.cur = c
		require.NoError(w.t, w.l.Save(hs, ents))
	case r < 70 && commit < c.last(): // commit only, not synced
		hs := hardState(w.term, 1, commit+1)
		w.kind = "commit"
		c.hs = hs
		w.cur = c
		require.NoError(w.t, w.l.Save(hs, nil))
	case r < 90 && commit > c.comp:
		idx := c.comp + 1 + w.rng.Uint64N(commit-c.comp)
		w.kind = "compact"
		c.compTerm = c.termAt(idx)
		c.ents = c.ents[idx-c.comp:]
		c.comp = idx
		w.cur = c
		require.NoError(w.t, w.l.Compact(idx, nil))
	default:
		idx := max(commit, c.comp) + 1 + w.rng.Uint64N(c.last()+5-max(commit, c.comp))
		w.term++
		w.kind = "snapshot"
		c.comp, c.compTerm, c.ents = idx, w.term, nil
		w.cur = c
		require.NoError(w.t, w.l.ApplySnapshot(snapMeta(idx, w.term, confState(1))))
		if w.stop != nil && w.stop() {
			return // the crash was in ApplySnapshot: prev and cur are its
		}
		w.prev = w.cur.clone()
		c.hs = hardState(w.term, 1, idx)
		w.cur = c
		w.kind = "save"
		w.start = idx + 1
		require.NoError(w.t, w.l.Save(c.hs, nil))
	}
}

// checkRecovered checks that a log reopened after a crash during the
// write under way holds everything acknowledged before it, and of that
// write either nothing or what a torn write can leave: never an older
// entry resurrected, never an acknowledged one missing.
func (w *cpWorkload) checkRecovered(t *testing.T, got mlog, what string) {
	t.Helper()
	prev, cur := w.prev, w.cur
	require.Contains(t, []uint64{prev.comp, cur.comp}, got.comp, "%s: compaction index", what)
	base := prev
	if got.comp == cur.comp && got.comp != prev.comp {
		base = cur
	}
	require.Equal(t, base.compTerm, got.compTerm, "%s: compaction term", what)
	ok := entriesEqual(base.ents, got.ents)
	if !ok && w.kind == "save" && got.comp == cur.comp {
		// A torn Save: the entries before its first, then some of its own.
		ok = got.last() >= w.start && got.last() <= cur.last() &&
			entriesEqual(cur.ents[:got.last()-cur.comp], got.ents)
	}
	require.True(t, ok, "%s (%s from %d): entries %d..%d, want those of %d..%d (before) or %d..%d (after)",
		what, w.kind, w.start, got.comp+1, got.last(), prev.comp+1, prev.last(), cur.comp+1, cur.last())
	hsOK := false
	for _, hs := range []*pb.HardState{prev.hs, cur.hs} {
		hsOK = hsOK || (hs.GetTerm() == got.hs.GetTerm() && hs.GetVote() == got.hs.GetVote())
	}
	require.True(t, hsOK, "%s: hard state %v, want the term and vote of %v or %v", what, got.hs, prev.hs, cur.hs)
	require.LessOrEqual(t, got.hs.GetCommit(), max(prev.hs.GetCommit(), cur.hs.GetCommit()), what)
}

func entriesEqual(a, b []*pb.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// A crash at any write, fsync, create, rename or removal, of any writer
// and of Open's own recovery, leaves a log Open accepts, holding what was
// acknowledged. Each trial crashes once during the workload, then perhaps
// again during the recovery, then writes on and reopens.
func TestCrashAtAnyPoint(t *testing.T) {
	const trials = 300
	for trial := range trials {
		rng := rand.New(rand.NewPCG(uint64(trial), 0x63726173))
		opts := Options{SegmentBytes: 1500 + int64(rng.IntN(1500)), SpareSegments: rng.IntN(3), TailCacheEntries: 1 + rng.IntN(20)}
		const dir = "/data/raft"
		fs := newPointFS(vfs.NewCrashableMem(), 0, 0, rng)
		opts.FS = fs
		l, err := Open(dir, nil, opts)
		require.NoError(t, err)
		w := &cpWorkload{t: t, rng: rng, l: l, cur: mlog{hs: new(pb.HardState)}, term: 1,
			stop: func() bool { return fs.crashed != nil }}
		// Warm up without crashing, then crash at a random later operation.
		for range 20 + rng.IntN(60) {
			w.step()
		}
		fs.crashAt = fs.ops + 1 + rng.IntN(40)
		for fs.crashed == nil {
			w.step()
		}
		require.NoError(t, l.Close())
		what := fmt.Sprintf("trial %d (%+v): crash at operation %d", trial, Options{SegmentBytes: opts.SegmentBytes, SpareSegments: opts.SpareSegments}, fs.crashAt)

		// Recover, perhaps crashing again inside Open.
		disk := fs.crashed
		fs2 := newPointFS(disk, 0, 0, rng)
		if rng.IntN(2) == 0 {
			fs2.crashAt = 1 + rng.IntN(12)
		}
		opts.FS = fs2
		l, err = Open(dir, nil, opts)
		if fs2.crashed != nil {
			if err == nil {
				require.NoError(t, l.Close())
			}
			what += fmt.Sprintf(", then at operation %d of Open", fs2.crashAt)
			opts.FS = newPointFS(fs2.crashed, 0, 0, rng)
			l, err = Open(dir, nil, opts)
		}
		require.NoError(t, err, what)
		got := readMlog(t, l)
		w.checkRecovered(t, got, what)

		// Write on from what was recovered, then reopen: what the crash
		// left behind must not come back.
		w.l, w.cur, w.stop = l, got, nil
		for _, e := range got.ents {
			w.term = max(w.term, e.GetTerm())
		}
		w.term = max(w.term, got.compTerm, got.hs.GetTerm())
		for range 10 + rng.IntN(40) {
			w.step()
		}
		want := w.cur
		require.NoError(t, l.Close())
		l, err = Open(dir, nil, opts)
		require.NoError(t, err, what+", written on, reopened")
		got = readMlog(t, l)
		require.Equal(t, want.comp, got.comp, what)
		require.True(t, entriesEqual(want.ents, got.ents), "%s, written on, reopened: entries %d..%d, want %d..%d",
			what, got.comp+1, got.last(), want.comp+1, want.last())
		require.True(t, proto.Equal(want.hs, got.hs), "%s: hard state %v, want %v", what, got.hs, want.hs)
		require.NoError(t, l.Close())
	}
}

// Open failing at any operation (a write, fsync, create, rename or
// removal of its recovery) closes every file it opened, and a log whose
// writer failed closes them all on Close: a node retrying Open does not
// run out of file descriptors.
func TestFailedOpenLeaksNoFile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const dir = "/data/raft"
	mem := vfs.NewCrashableMem()
	fs := newPointFS(mem, 0, 0, rng)
	opts := Options{FS: fs, SegmentBytes: 1500, SpareSegments: 2}
	l, err := Open(dir, nil, opts)
	require.NoError(t, err)
	w := &cpWorkload{t: t, rng: rng, l: l, cur: mlog{hs: new(pb.HardState)}, term: 1}
	for range 150 {
		w.step()
	}
	require.NoError(t, l.Close())
	require.Zero(t, fs.open)

	for failAt := 1; ; failAt++ {
		// Each attempt on a copy, so that what a failed attempt changed
		// does not change the next one's course.
		fs := newPointFS(mem.CrashClone(vfs.CrashCloneCfg{}), 0, failAt, rng)
		opts.FS = fs
		l, err := Open(dir, nil, opts)
		if err == nil {
			require.NoError(t, l.Close())
			require.Zero(t, fs.open, "files left open")
			require.Greater(t, failAt, 3, "no operation of Open failed")
			break
		}
		require.ErrorIs(t, err, errInjected)
		require.Zero(t, fs.open, "open failing at operation %d left files open", failAt)
	}
}
