package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/kvd-project/kvd/internal/kv"
)

// Error is the JSON body of every error response.
type Error struct {
	// Error is a human-readable message.
	Error string `json:"error"`
	// Code is a stable machine-readable class: bad_request, bad_key,
	// bad_flags, bad_ttl, bad_limit, bad_consistency, bad_precondition,
	// not_found, method_not_allowed, precondition_failed, cas_mismatch,
	// too_large, unsupported_media_type (415: a PUT with a content
	// coding), not_ready, no_leader, timeout, unknown_outcome, busy,
	// no_space, shutting_down, internal; on the cluster endpoints also
	// bad_json, unsupported_media_type (415), cross_site (403),
	// not_implemented, member_exists, last_voter, no_transfer_target,
	// quorum_at_risk, removed, version_too_old,
	// not_leader, leader_unreachable, and the 503s leader_transfer and
	// change_in_progress (retry).
	Code string `json:"code"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, Error{Error: msg, Code: code})
}

// failErr answers an error from the kv service and returns the result label
// for kvd_requests_total. Everything the service can report about the
// cluster (no quorum, not ready, timeouts, overload, shutdown) is a 503: the
// request may succeed on retry. A disk below --min-free-disk is a 507 until
// space is freed. Anything else is our fault: a 500, logged.
func (a *api) failErr(w http.ResponseWriter, r *http.Request, err error) string {
	status, code, msg := http.StatusServiceUnavailable, "", ""
	switch {
	case errors.Is(err, kv.ErrNotReady):
		code, msg = "not_ready", "node is not ready: it has not replayed its log or knows no leader"
	case errors.Is(err, kv.ErrNoLeader):
		code, msg = "no_leader", "no leader: the cluster has no quorum"
	case errors.Is(err, kv.ErrUnknownOutcome):
		code, msg = "unknown_outcome", "the write's outcome is unknown (a timeout, a leader change or a stop while it was in flight): it may have been applied"
	case errors.Is(err, kv.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		code, msg = "timeout", "request timed out"
	case errors.Is(err, kv.ErrBusy):
		code, msg = "busy", "too many requests in flight; retry later"
	case errors.Is(err, kv.ErrNoSpace):
		status, code, msg = http.StatusInsufficientStorage, "no_space", "the node's disk is nearly full: writes are refused until space is freed"
	case errors.Is(err, kv.ErrStopped), errors.Is(err, context.Canceled):
		code, msg = "shutting_down", "node is shutting down or the request was canceled"
	default:
		status, code, msg = http.StatusInternalServerError, "internal", "internal error"
		a.logger.Error("http request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, status, code, msg)
	if status == http.StatusServiceUnavailable || status == http.StatusInsufficientStorage {
		return "unavailable"
	}
	return "error"
}
