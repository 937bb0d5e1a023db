package httpapi_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
)

// A membership change whose leader lost its leadership or stopped while the
// change was in flight ends with kv.ErrUnknownOutcome: it may still commit.
// That was answered 400 bad_request, which reads as "your request is
// wrong" and which `kvd serve --join` takes as final, although a retry is
// answered truthfully (an add that did commit is answered as done). It is
// a 503 that says the change may have been made.
func TestAdminChangeOfUnknownOutcomeIsRetryable(t *testing.T) {
	n := startNode(t)
	srv := httptest.NewServer(httpapi.New(n.KV(), slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.Options{Admin: refusingAdmin{kv.ErrUnknownOutcome}}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	json := []string{"Content-Type", "application/json"}
	for _, r := range []response{
		c.do(http.MethodPost, "/v1/cluster/members", strings.NewReader(`{"name":"n9","peer_addr":"127.0.0.1:9"}`), json...),
		c.do(http.MethodDelete, "/v1/cluster/members/n9", nil),
	} {
		msg := expectError(t, r, http.StatusServiceUnavailable, "unknown_outcome")
		require.Contains(t, msg, "may have been")
		require.Equal(t, "1", r.header.Get("Retry-After"))
	}
}

// A leadership transfer with no voter to go to (a single node, or the
// others down) is the cluster's state, not a malformed request: 409
// no_transfer_target, where it was a 400 bad_request.
func TestTransferWithNoTargetIsAConflict(t *testing.T) {
	n := startNode(t)
	srv := httptest.NewServer(httpapi.New(n.KV(), slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.Options{Admin: refusingAdmin{fmt.Errorf("transfer leadership: %w", kv.ErrNoTransferTarget)}}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	r := c.do(http.MethodPost, "/v1/cluster/transfer-leader", strings.NewReader(`{}`), "Content-Type", "application/json")
	require.Contains(t, expectError(t, r, http.StatusConflict, "no_transfer_target"), "no other voter")
}
