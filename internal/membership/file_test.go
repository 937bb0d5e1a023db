package membership

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
)

// cluster.json is written once, atomically (temporary file, fsync, rename,
// fsync of the directory), so kvd itself never leaves it partial; a file
// damaged from outside (a restored backup cut short, a disk error) must stop
// the start with an error that names the file and the problem, never be read
// as a cluster without members, which would start a member that knows none
// of its peers.
func TestLoadMembershipFromDamagedFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		fresh   bool
		tmp     string // left by a crash before the rename
		want    string // "" when the start goes on
	}{
		{name: "empty", content: "", want: "is empty"},
		{name: "truncated", content: `{"cluster_id": 1, "mem`, want: "is damaged"},
		{name: "null", content: "null", want: "names no members"},
		{name: "no members", content: "{}", want: "names no members"},
		{name: "not json", content: "\x00\x00\x00\x00", want: "is damaged"},
		{name: "founding member", content: `{"cluster_id":1,"members":[{"name":"n1","id":1,"peer_addr":"127.0.0.1:1"}],"self":"n1"}`},
		{name: "joined member", content: `{"cluster_id":1,"members":[],"bootstrap_voters":[2],"self":"n1"}`},
		{name: "crash before the rename, first start again", fresh: true, tmp: `{"cluster_id": 1, "mem`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config.Default()
			cfg.Name, cfg.DataDir, cfg.PeerAddr = "n1", dir, "127.0.0.1:0"
			path := filepath.Join(dir, FileName)
			if tc.tmp != "" {
				require.NoError(t, os.WriteFile(path+".tmp", []byte(tc.tmp), 0o640))
			} else {
				require.NoError(t, os.WriteFile(path, []byte(tc.content), 0o640))
			}
			m, err := Load(cfg, tc.fresh)
			if tc.want != "" {
				require.ErrorContains(t, err, path)
				require.ErrorContains(t, err, tc.want)
				require.Nil(t, m)
				return
			}
			require.NoError(t, err)
			require.NotEmpty(t, m.BootstrapVoters())
			if tc.tmp != "" {
				// Written anew, and read back the same on the next start.
				again, err := Load(cfg, false)
				require.NoError(t, err)
				require.Equal(t, m, again)
			}
		})
	}
}
