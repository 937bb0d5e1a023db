package durable

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// TestMkdirAllKeepsOthersOut: the directories kvd creates (the data dir
// among them, created as the parent of its stores) hold every value a
// client stored; they were created 0755, readable by every user of the
// host.
func TestMkdirAllKeepsOthersOut(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data", "raft")
	require.NoError(t, MkdirAll(vfs.Default, dir))
	for _, d := range []string{filepath.Join(root, "data"), dir} {
		info, err := os.Stat(d)
		require.NoError(t, err)
		require.Zero(t, info.Mode().Perm()&0o007, "%s is %v", d, info.Mode().Perm())
	}
}
