package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/snapfile"
)

// The file a save writes: FILE, or a time-stamped name in --dir; every
// other combination is refused before anything is dialled.
func TestSnapshotSaveTarget(t *testing.T) {
	now := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, tc := range []struct {
		name string
		args []string
		dir  string
		keep int
		want string // "" with err
		err  string
	}{
		{name: "a file", args: []string{"b.kvdsnap"}, want: "b.kvdsnap"},
		{name: "a dir", dir: "/backup", keep: 3, want: "/backup/kvd-20240506T070809.000Z.kvdsnap"},
		{name: "neither", err: "give FILE, or --dir"},
		{name: "both", args: []string{"b.kvdsnap"}, dir: "/backup", err: "not both"},
		{name: "keep without dir", args: []string{"b.kvdsnap"}, keep: 2, err: "--keep prunes a --dir"},
		{name: "negative keep", dir: "/backup", keep: -1, err: "--keep -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &snapshotOptions{dir: tc.dir, keep: tc.keep}
			got, err := o.saveTarget(tc.args, now)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// kvd snapshot save --dir --keep, run as a scheduled job would: each run
// adds a file named by time, and the directory holds the newest --keep.
func TestSnapshotSaveIntoADirKeepsTheNewest(t *testing.T) {
	var body bytes.Buffer
	w, err := snapfile.NewWriter(&body, snapfile.Header{Member: "n1", Applied: 3, ItemsEstimate: 1})
	require.NoError(t, err)
	require.NoError(t, w.Add(snapfile.Record{Key: []byte("k"), Value: []byte("v")}))
	_, err = w.Close()
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body.Bytes()) }))
	defer srv.Close()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep-me.kvdsnap"), []byte("x"), 0o600))
	var names []string
	for range 4 {
		out, _, err := runArgs(t, "snapshot", "save", "--dir", dir, "--keep", "2", "--endpoints", srv.URL)
		require.NoError(t, err)
		require.Contains(t, out, "saved "+dir)
		names = append(names, strings.TrimSuffix(strings.Fields(strings.TrimPrefix(out, "saved "))[0], ":"))
		// Names are to the millisecond: two runs within one would write
		// the same file. Scheduled runs are minutes apart.
		time.Sleep(2 * time.Millisecond)
	}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var left []string
	for _, e := range ents {
		left = append(left, filepath.Join(dir, e.Name()))
	}
	require.ElementsMatch(t, []string{filepath.Join(dir, "keep-me.kvdsnap"), names[2], names[3]}, left)
}
