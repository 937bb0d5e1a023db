package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		existing  []byte // nil: no file before
		overwrite bool
		perm      os.FileMode
		wantErr   error
		want      []byte
	}{
		{name: "new file", perm: 0o600, want: []byte("new")},
		{name: "new file, overwrite allowed", overwrite: true, perm: 0o644, want: []byte("new")},
		{name: "existing, no overwrite", existing: []byte("old"), perm: 0o600, wantErr: atomicfile.ErrExists, want: []byte("old")},
		{name: "existing, overwrite", existing: []byte("old"), overwrite: true, perm: 0o600, want: []byte("new")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if tc.existing != nil {
				require.NoError(t, os.WriteFile(path, tc.existing, 0o644))
			}
			err := atomicfile.Write(path, []byte("new"), tc.perm, tc.overwrite)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
				info, err := os.Stat(path)
				require.NoError(t, err)
				assert.Equal(t, tc.perm, info.Mode().Perm(), "mode set regardless of umask")
			}
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, entries, 1, "no temporary file left behind")
		})
	}
}

func TestWriteMissingDirectoryIsAnError(t *testing.T) {
	err := atomicfile.Write(filepath.Join(t.TempDir(), "nope", "f"), []byte("x"), 0o600, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nope")
}
