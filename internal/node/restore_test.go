package node

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/membership"
	"github.com/kvd-project/kvd/internal/snapfile"
)

func writeBackup(t *testing.T, items int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.kvdsnap")
	f, err := os.Create(path)
	require.NoError(t, err)
	w, err := snapfile.NewWriter(f, snapfile.Header{ClusterID: 0xabc, Member: "old", Applied: 77})
	require.NoError(t, err)
	for i := range items {
		require.NoError(t, w.Add(snapfile.Record{Key: []byte{'k', byte('a' + i)}, Flags: uint32(i), Value: []byte("v")}))
	}
	_, err = w.Close()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return path
}

// TestRestoreBuildsEachMembersDataDir: data members get the items, a
// witness none; all share one new cluster ID.
func TestRestoreBuildsEachMembersDataDir(t *testing.T) {
	file := writeBackup(t, 5)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ids := map[uint64]bool{}
	for _, tc := range []struct {
		name    string
		witness bool
	}{{"a", false}, {"b", false}, {"w", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Name, cfg.DataDir = tc.name, filepath.Join(t.TempDir(), tc.name)
			cfg.InitialCluster, cfg.InitialWitnesses = "a=127.0.0.1:1,b=127.0.0.1:2,w=127.0.0.1:3", "w"
			res, err := Restore(RestoreOptions{File: file, Config: cfg}, logger)
			require.NoError(t, err)
			require.Equal(t, tc.witness, res.Witness)
			ids[res.ClusterID] = true

			b, err := os.ReadFile(filepath.Join(cfg.DataDir, membership.FileName))
			require.NoError(t, err)
			var m membership.File
			require.NoError(t, json.Unmarshal(b, &m))
			require.Equal(t, res.ClusterID, m.ClusterID)
			require.Equal(t, tc.name, m.Self)
			require.Len(t, m.Members, 3)

			st, err := fsm.Open(filepath.Join(cfg.DataDir, storeDir(tc.witness)), logger, fsm.Options{Witness: tc.witness})
			require.NoError(t, err)
			defer st.Close()
			require.Equal(t, uint64(77), st.AppliedIndex())
			want := int64(5)
			if tc.witness {
				want = 0
			}
			require.Equal(t, want, st.Stats().Items)
			require.NoDirExists(t, filepath.Join(cfg.DataDir, storeDir(!tc.witness)))
		})
	}
	require.Len(t, ids, 1, "every member derives the same cluster ID")
	require.False(t, ids[0xabc], "the restored cluster is a new one")
}
