package raftlog

import (
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/stretchr/testify/require"
)

// crash simulates a power loss on a strict in-memory filesystem: everything
// not fsynced is lost. l is unusable afterwards.
func crash(t *testing.T, fs *vfs.MemFS, l *Log) {
	t.Helper()
	fs.SetIgnoreSyncs(true) // nothing from here on reaches "disk"
	require.NoError(t, l.Close())
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
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
			fs := vfs.NewStrictMem()
			// The data dir does not exist yet: Open must also make the
			// directory entries durable.
			const dir = "/data/kvd/raft"
			opts := Options{FS: fs}
			l, err := Open(dir, nil, opts)
			require.NoError(t, err)
			tc.write(t, l)
			want := captureState(t, l)

			// Check the harness: a write Pebble was not asked to sync must
			// be lost in the crash.
			require.NoError(t, l.db.Set([]byte("x-unsynced"), []byte("lost"), pebble.NoSync))

			crash(t, fs, l)

			l, err = Open(dir, nil, opts)
			require.NoError(t, err)
			defer l.Close()
			requireSameState(t, want, captureState(t, l))
			v, err := l.get([]byte("x-unsynced"))
			require.NoError(t, err)
			require.Nil(t, v, "the unsynced write survived: the crash simulation does not work")
		})
	}
}
