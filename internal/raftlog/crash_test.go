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
