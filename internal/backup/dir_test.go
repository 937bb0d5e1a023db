package backup

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// DirName's names sort as the times they are given, whatever the zone.
func TestDirNameSortsByTime(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 678e6, time.FixedZone("CET", 3600))
	require.Equal(t, "kvd-20240102T020405.678Z.kvdsnap", DirName(at))
	require.Less(t, DirName(at), DirName(at.Add(time.Millisecond)))
	require.Less(t, DirName(at), DirName(at.Add(10*time.Hour)))
	require.True(t, isDirSnapshot(DirName(at)))
}

// Prune keeps the newest keep snapshots a save into the directory wrote,
// removes the .part files of older saves, and never touches anything else.
func TestPrune(t *testing.T) {
	s := func(hour int) string { return DirName(time.Date(2024, 1, 2, hour, 0, 0, 0, time.UTC)) }
	for _, tc := range []struct {
		name  string
		files []string
		keep  int
		want  []string // what remains, sorted
	}{
		{name: "keeps the newest", files: []string{s(1), s(3), s(2), s(4)}, keep: 2, want: []string{s(3), s(4)}},
		{name: "fewer than keep", files: []string{s(1), s(2)}, keep: 5, want: []string{s(1), s(2)}},
		{name: "keep 0 keeps all", files: []string{s(1), s(2), s(3)}, keep: 0, want: []string{s(1), s(2), s(3)}},
		{name: "other files are the operator's",
			files: []string{s(1), s(2), "kvd-latest.kvdsnap", "notes.txt", "kvd-20240102T010000Z.kvdsnap", "backup.kvdsnap"}, keep: 1,
			want: []string{"backup.kvdsnap", "kvd-20240102T010000Z.kvdsnap", s(2), "kvd-latest.kvdsnap", "notes.txt"}},
		{name: "a .part older than the newest save is a dead save's; a newer may be running",
			files: []string{s(1) + ".part", s(2), s(3) + ".part"}, keep: 3, want: []string{s(2), s(3) + ".part"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600))
			}
			removed, err := Prune(dir, tc.keep)
			require.NoError(t, err)
			var left []string
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range ents {
				left = append(left, e.Name())
			}
			require.Equal(t, tc.want, left)
			require.Len(t, removed, len(tc.files)-len(tc.want))
		})
	}
}

// A missing directory is an error, not an empty one.
func TestPruneMissingDir(t *testing.T) {
	_, err := Prune(filepath.Join(t.TempDir(), "absent"), 1)
	require.ErrorContains(t, err, "prune snapshots")
}
