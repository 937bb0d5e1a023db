package kvdproc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRemoveBinariesLeavesNoBuild: the binary built for a test process goes
// with its temporary directory once RemoveBinaries runs (each build used to
// stay behind in the temp directory, 45 MiB a run), and a prebuilt KVD_BIN
// is never touched.
func TestRemoveBinariesLeavesNoBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kvd")
	}
	if os.Getenv("KVD_BIN") != "" {
		t.Skip("KVD_BIN names a prebuilt kvd: nothing is built")
	}
	bin := Binary(t)
	dir := filepath.Dir(bin)
	_, err := os.Stat(bin)
	require.NoError(t, err)
	require.NoError(t, RemoveBinaries())
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "the build directory %s is still there", dir)
}
