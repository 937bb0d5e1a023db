package backup

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/snapfile"
)

func snapshotBytes(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := snapfile.NewWriter(&buf, snapfile.Header{Member: "n1", Applied: 9, ItemsEstimate: uint64(n)})
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, w.Add(snapfile.Record{Key: []byte{'k', byte(i)}, Value: bytes.Repeat([]byte{'v'}, 1000)}))
	}
	_, err = w.Close()
	require.NoError(t, err)
	return buf.Bytes()
}

// TestSaveNeverLeavesAPartialFile: whatever goes wrong, the file is either
// whole under its name, or absent (and so is its .part).
func TestSaveNeverLeavesAPartialFile(t *testing.T) {
	good := snapshotBytes(t, 200)
	damaged := bytes.Clone(good)
	damaged[len(damaged)/2] ^= 1
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter)
		want  string // "" : success
	}{
		{"whole", func(w http.ResponseWriter) { _, _ = w.Write(good) }, ""},
		{"member refuses", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusMisdirectedRequest)
			_, _ = w.Write([]byte(`{"error":"this member is a witness"}`))
		}, "witness"},
		{"stream cut short", func(w http.ResponseWriter) {
			_, _ = w.Write(good[:len(good)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // as the member does when it fails mid-stream
		}, "snapshot save from"},
		{"stream ends early but cleanly", func(w http.ResponseWriter) { _, _ = w.Write(good[:len(good)-3]) }, "truncated"},
		{"damaged on the way", func(w http.ResponseWriter) { _, _ = w.Write(damaged) }, "checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "/v1/snapshot", r.URL.Path)
				tc.serve(w)
			}))
			defer srv.Close()
			file := filepath.Join(t.TempDir(), "s.kvdsnap")
			var progressed int
			sum, err := Save(context.Background(), SaveOptions{Endpoint: srv.URL, File: file, Progress: func(Progress) { progressed++ }})
			require.NoFileExists(t, file+".part")
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
				require.NoFileExists(t, file)
				return
			}
			require.NoError(t, err)
			require.Equal(t, uint64(200), sum.Items)
			require.Positive(t, progressed, "progress is reported (every item with a zero interval)")
			got, err := os.ReadFile(file)
			require.NoError(t, err)
			require.Equal(t, good, got)
			h, tr, size, err := Status(file)
			require.NoError(t, err)
			require.Equal(t, "n1", h.Member)
			require.Equal(t, uint64(200), tr.Items)
			require.Equal(t, int64(len(good)), size)
		})
	}
}
