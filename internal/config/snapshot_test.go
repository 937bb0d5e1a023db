package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSnapshotSettings(t *testing.T) {
	c := Default()
	require.Equal(t, uint64(10000), c.SnapshotCount)
	require.Equal(t, uint64(5000), c.SnapshotCatchupEntries)

	c.SnapshotCount, c.SnapshotCatchupEntries = 0, 0
	err := c.Validate()
	require.Error(t, err)
	require.Contains(t, err.Error(), "snapshot-count")
	require.Contains(t, err.Error(), "snapshot-catchup-entries")

	path := filepath.Join(t.TempDir(), "kvd.yaml")
	require.NoError(t, os.WriteFile(path, []byte("snapshot-count: 200\nsnapshot-catchup-entries: 50\n"), 0o600))
	c = Default()
	require.NoError(t, c.LoadFile(path))
	require.Equal(t, uint64(200), c.SnapshotCount)
	require.Equal(t, uint64(50), c.SnapshotCatchupEntries)
	require.NoError(t, c.Validate())
}
