package durable_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/durable"
)

// syncDir fsyncs dir on fs, as a start that got that far would have.
func syncDir(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	d, err := fs.OpenDir(dir)
	require.NoError(t, err)
	require.NoError(t, d.Sync())
	require.NoError(t, d.Close())
}

// The directory MkdirAll returns for survives a power loss, whatever an
// earlier start left: nothing, or directories created and never synced
// (killed before its syncs, or made by mkdir -p).
func TestMkdirAllSurvivesCrash(t *testing.T) {
	const dir = "/data/kvd/raft"
	tests := []struct {
		name  string
		setup func(t *testing.T, fs *vfs.MemFS)
	}{
		{name: "nothing exists", setup: func(*testing.T, *vfs.MemFS) {}},
		{name: "all exist, never synced", setup: func(t *testing.T, fs *vfs.MemFS) {
			require.NoError(t, fs.MkdirAll(dir, 0o755))
		}},
		{name: "parents exist, never synced", setup: func(t *testing.T, fs *vfs.MemFS) {
			require.NoError(t, fs.MkdirAll("/data/kvd", 0o755))
		}},
		{name: "all exist, only the top synced", setup: func(t *testing.T, fs *vfs.MemFS) {
			require.NoError(t, fs.MkdirAll(dir, 0o755))
			syncDir(t, fs, "/")
		}},
		{name: "all exist and synced", setup: func(t *testing.T, fs *vfs.MemFS) {
			require.NoError(t, fs.MkdirAll(dir, 0o755))
			for _, d := range []string{"/", "/data", "/data/kvd"} {
				syncDir(t, fs, d)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			tc.setup(t, fs)
			require.NoError(t, durable.MkdirAll(fs, dir))
			after := fs.CrashClone(vfs.CrashCloneCfg{})
			st, err := after.Stat(dir)
			require.NoError(t, err, "the directory did not survive the crash")
			require.True(t, st.IsDir())
		})
	}
}

// A path through a file is refused with an error naming it.
func TestMkdirAllRefusesAFileInThePath(t *testing.T) {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/data", 0o755))
	f, err := fs.Create("/data/kvd", vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	err = durable.MkdirAll(fs, "/data/kvd/raft")
	require.ErrorContains(t, err, "/data/kvd")
}
