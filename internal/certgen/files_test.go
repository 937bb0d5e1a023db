package certgen_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/certgen"
)

func TestPairWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		existing  []string // of "crt", "key"
		overwrite bool
		wantErr   bool
	}{
		{name: "fresh"},
		{name: "both exist", existing: []string{"crt", "key"}, wantErr: true},
		{name: "only the key exists", existing: []string{"key"}, wantErr: true},
		{name: "only the certificate exists", existing: []string{"crt"}, wantErr: true},
		{name: "both exist, overwrite", existing: []string{"crt", "key"}, overwrite: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := certgen.PairIn(dir, "n1")
			assert.Equal(t, filepath.Join(dir, "n1.crt"), p.Cert)
			assert.Equal(t, filepath.Join(dir, "n1.key"), p.Key)
			for _, ext := range tc.existing {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "n1."+ext), []byte("old"), 0o644))
			}
			err := p.Write([]byte("cert"), []byte("key"), tc.overwrite)
			if tc.wantErr {
				require.ErrorIs(t, err, fs.ErrExist)
				assert.Contains(t, err.Error(), "--force")
				// Nothing was half-replaced.
				for _, ext := range []string{"crt", "key"} {
					data, err := os.ReadFile(filepath.Join(dir, "n1."+ext))
					if err == nil {
						assert.Equal(t, "old", string(data))
					}
				}
				return
			}
			require.NoError(t, err)
			certPEM, keyPEM, err := p.Read()
			require.NoError(t, err)
			assert.Equal(t, "cert", string(certPEM))
			assert.Equal(t, "key", string(keyPEM))
			for path, mode := range map[string]os.FileMode{p.Cert: certgen.CertMode, p.Key: certgen.KeyMode} {
				info, err := os.Stat(path)
				require.NoError(t, err)
				assert.Equal(t, mode, info.Mode().Perm(), path)
			}
		})
	}
}
