package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
)

// fakeSnapshots streams body, or fails with err before its first byte.
type fakeSnapshots struct {
	body string
	err  error
}

func (f fakeSnapshots) WriteSnapshot(_ context.Context, begin func(), w io.Writer) error {
	if f.err != nil {
		return f.err
	}
	begin()
	_, err := io.WriteString(w, f.body)
	return err
}

func TestSnapshotEndpoint(t *testing.T) {
	n := startNode(t)
	const why = "this member is a witness and holds no data: send data requests to a data member: n1 (h:1)"
	for _, tc := range []struct {
		name   string
		opts   httpapi.Options
		status int
		code   string
		body   string
	}{
		{"streams", httpapi.Options{Snapshots: fakeSnapshots{body: "KVDSNAP\n…"}}, http.StatusOK, "", "KVDSNAP\n…"},
		{"a witness refuses", httpapi.Options{Snapshots: fakeSnapshots{body: "x"}, Witness: func() string { return why }}, http.StatusMisdirectedRequest, "witness", ""},
		{"no quorum for the barrier", httpapi.Options{Snapshots: fakeSnapshots{err: kv.ErrNoLeader}}, http.StatusServiceUnavailable, "no_leader", ""},
		{"not served", httpapi.Options{}, http.StatusNotFound, "not_found", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(httpapi.New(n.KV(), slog.New(slog.NewTextHandler(io.Discard, nil)), tc.opts))
			defer srv.Close()
			r := newClient(t, srv.URL).get("/v1/snapshot")
			if tc.code != "" {
				expectError(t, r, tc.status, tc.code)
				return
			}
			require.Equal(t, tc.status, r.status)
			require.Equal(t, tc.body, string(r.body))
			require.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
		})
	}
}
