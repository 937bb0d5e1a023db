package raftlog

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// crash simulates a power loss on a crashable in-memory filesystem: it
// returns what the disk holds after it, which is everything fsynced and
// nothing else. l is closed and unusable afterwards.
func crash(t *testing.T, fs *vfs.MemFS, l *Log) *vfs.MemFS {
	t.Helper()
	after := fs.CrashClone(vfs.CrashCloneCfg{})
	require.NoError(t, l.Close())
	return after
}

// Everything a writer returned for survives a crash.
func TestWritesSurviveCrash(t *testing.T) {
	tests := []struct {
		name  string
		write func(t *testing.T, l *Log)
	}{
		{name: "nothing written", write: func(t *testing.T, l *Log) {}},
		{name: "bootstrap", write: func(t *testing.T, l *Log) {
			require.NoError(t, l.Bootstrap(confState(1, 2, 3)))
		}},
		{name: "entries and hard state in many batches", write: func(t *testing.T, l *Log) {
			require.NoError(t, l.Bootstrap(confState(1)))
			for i := uint64(1); i <= 200; i += 4 {
				require.NoError(t, l.Save(hardState(1, 1, i-1), entries(i, i+3, 1)))
			}
		}},
		{name: "hard state only", write: func(t *testing.T, l *Log) {
			require.NoError(t, l.Save(hardState(1, 1, 0), entries(1, 2, 1)))
			require.NoError(t, l.Save(hardState(5, 3, 2), nil))
		}},
		{name: "overwritten tail", write: func(t *testing.T, l *Log) {
			require.NoError(t, l.Save(hardState(1, 1, 3), entries(1, 30, 1)))
			require.NoError(t, l.Save(hardState(2, 2, 3), entries(10, 12, 2)))
		}},
		{name: "compaction", write: func(t *testing.T, l *Log) {
			require.NoError(t, l.Save(hardState(1, 1, 30), entries(1, 40, 1)))
			require.NoError(t, l.Compact(25, confState(1, 2)))
		}},
		{name: "snapshot", write: func(t *testing.T, l *Log) {
			require.NoError(t, l.Save(hardState(1, 1, 30), entries(1, 40, 1)))
			require.NoError(t, l.ApplySnapshot(snapMeta(90, 3, confState(1, 2, 3))))
			require.NoError(t, l.Save(hardState(3, 2, 90), entries(91, 95, 3)))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			// The data dir does not exist yet: Open must also make the
			// directory entries durable.
			const dir = "/data/kvd/raft"
			opts := Options{FS: fs}
			l, err := Open(dir, nil, opts)
			require.NoError(t, err)
			tc.write(t, l)
			want := captureState(t, l)

			// Check the harness: data not fsynced must be lost in the crash.
			seg, off := l.segs[len(l.segs)-1], l.off
			_, err = seg.f.WriteAt([]byte("lost"), off)
			require.NoError(t, err)

			opts.FS = crash(t, fs, l)
			f, err := opts.FS.Open(opts.FS.PathJoin(dir, segmentName(seg.seq)))
			require.NoError(t, err)
			got := make([]byte, 4)
			_, _ = f.ReadAt(got, off)
			require.NoError(t, f.Close())
			require.NotEqual(t, "lost", string(got), "the unsynced write survived: the crash simulation does not work")

			l, err = Open(dir, nil, opts)
			require.NoError(t, err)
			defer l.Close()
			requireSameState(t, want, captureState(t, l))
		})
	}
}

// A HardState that moves only the commit index is written without fsync
// (raft's MustSync): a crash may take the commit index back to the last
// synced one, never below it, and never loses entries, term or vote. The
// next synced Save makes the earlier commit durable too (records are
// written in order).
func TestCommitOnlyHardStateIsNotSynced(t *testing.T) {
	fs := vfs.NewCrashableMem()
	const dir = "/data/raft"
	opts := Options{FS: fs}
	l, err := Open(dir, nil, opts)
	require.NoError(t, err)
	require.NoError(t, l.Save(hardState(2, 1, 3), entries(1, 10, 2)))
	synced := l.Stats().SyncCount
	require.NoError(t, l.Save(hardState(2, 1, 8), nil))
	require.Equal(t, synced, l.Stats().SyncCount, "a commit-only HardState must not fsync")
	hs, _, err := l.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(8), hs.GetCommit(), "the unsynced commit is visible before a crash")

	fs = crash(t, fs, l)
	opts.FS = fs
	l, err = Open(dir, nil, opts)
	require.NoError(t, err)
	hs, _, err = l.InitialState()
	require.NoError(t, err)
	require.Equal(t, hardState(2, 1, 3).String(), hs.String(), "the crash takes commit back to the synced 3")
	last, err := l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(10), last)

	// Commit moves unsynced, then entries arrive: that fsync covers both.
	require.NoError(t, l.Save(hardState(2, 1, 9), nil))
	require.NoError(t, l.Save(nil, entries(11, 12, 2)))
	opts.FS = crash(t, fs, l)
	l, err = Open(dir, nil, opts)
	require.NoError(t, err)
	defer l.Close()
	hs, _, err = l.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(9), hs.GetCommit())
	last, err = l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(12), last)

	// A new term or vote is always synced.
	synced = l.Stats().SyncCount
	require.NoError(t, l.Save(hardState(3, 0, 9), nil))
	require.NoError(t, l.Save(hardState(3, 2, 9), nil))
	require.Equal(t, synced+2, l.Stats().SyncCount)
}

// reorderFS models a file system that may persist directory changes out of
// order until the directory is synced: it keeps the renames and removals
// made since the last sync, so that a test can build the disk where only the
// latest of them survived a crash. One directory is in play.
type reorderFS struct {
	*vfs.MemFS
	unsynced []func(vfs.FS) error
	// changed, when set, runs after each rename or removal.
	changed func()
}

func (r *reorderFS) Rename(oldname, newname string) error {
	if err := r.MemFS.Rename(oldname, newname); err != nil {
		return err
	}
	r.record(func(fs vfs.FS) error { return fs.Rename(oldname, newname) })
	return nil
}

func (r *reorderFS) Remove(name string) error {
	if err := r.MemFS.Remove(name); err != nil {
		return err
	}
	r.record(func(fs vfs.FS) error { return fs.Remove(name) })
	return nil
}

func (r *reorderFS) record(change func(vfs.FS) error) {
	r.unsynced = append(r.unsynced, change)
	if r.changed != nil {
		r.changed()
	}
}

func (r *reorderFS) OpenDir(name string) (vfs.File, error) {
	f, err := r.MemFS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &dirSyncFile{File: f, synced: func() { r.unsynced = nil }}, nil
}

// crashKeepingLast is the disk after a crash that kept what was synced
// and, of the directory changes since, only the latest.
func (r *reorderFS) crashKeepingLast(t *testing.T) *vfs.MemFS {
	t.Helper()
	after := r.CrashClone(vfs.CrashCloneCfg{})
	if n := len(r.unsynced); n > 0 {
		require.NoError(t, r.unsynced[n-1](after))
	}
	return after
}

type dirSyncFile struct {
	vfs.File
	synced func()
}

func (f *dirSyncFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.synced()
	return nil
}

// Moving on to a new segment retires every segment the log was compacted
// past, oldest first, by renaming it to a spare or removing it. A crash in
// the middle, on a file system that kept a later directory change and not
// an earlier one, must still leave consecutive segments: a gap is what Open
// refuses as damage.
func TestCrashWhileRetiringSegmentsLeavesNoGap(t *testing.T) {
	for _, spares := range []int{0, 8} { // removals; renames to spares
		fs := &reorderFS{MemFS: vfs.NewCrashableMem()}
		const dir = "/data/raft"
		opts := Options{FS: fs, SegmentBytes: 2048, SpareSegments: spares}
		l, err := Open(dir, nil, opts)
		require.NoError(t, err)
		for i := uint64(1); i <= 400; i += 4 {
			require.NoError(t, l.Save(hardState(1, 1, i+3), entries(i, i+3, 1)))
		}
		require.Greater(t, len(l.segs), 6, "spares %d: the test needs many segments to retire", spares)
		require.NoError(t, l.Compact(390, nil))

		changes, acked := 0, uint64(400)
		fs.changed = func() {
			changes++
			after := fs.crashKeepingLast(t)
			l2, err := Open(dir, nil, Options{FS: after, SegmentBytes: 2048, SpareSegments: spares})
			require.NoError(t, err, "spares %d: crash after %d renames or removals", spares, changes)
			last, err := l2.LastIndex()
			require.NoError(t, err)
			require.GreaterOrEqual(t, last, acked)
			require.NoError(t, l2.Close())
		}
		first := l.segs[len(l.segs)-1].seq
		for i := acked + 1; l.segs[len(l.segs)-1].seq == first; i++ {
			require.NoError(t, l.Save(hardState(1, 1, i), entries(i, i, 1)))
			acked = i
		}
		fs.changed = nil
		require.Greater(t, changes, 3, "spares %d: too few segments were retired", spares)
		require.NoError(t, l.Close())
	}
}

// A start killed after creating the data directories and before syncing
// their parents leaves them unsynced: the next start must make them
// durable, or a power loss later takes the directory, and the log, away.
func TestLogSurvivesCrashAfterInterruptedDirectoryCreate(t *testing.T) {
	fs := vfs.NewCrashableMem()
	const dir = "/data/kvd/raft"
	// The killed start (kill -9: the page cache keeps the directories).
	require.NoError(t, fs.MkdirAll(dir, 0o755))
	l, err := Open(dir, nil, Options{FS: fs})
	require.NoError(t, err)
	require.NoError(t, l.Save(hardState(1, 1, 0), entries(1, 5, 1)))
	want := captureState(t, l)

	l, err = Open(dir, nil, Options{FS: crash(t, fs, l)})
	require.NoError(t, err)
	defer l.Close()
	requireSameState(t, want, captureState(t, l))
}
