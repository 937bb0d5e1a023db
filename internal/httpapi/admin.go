package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/kv"
)

// Admin changes the cluster: membership and leadership. The node provides it;
// without one the endpoints answer 501.
type Admin interface {
	// AddMember adds m as a learner (promoted to voter by the leader once it
	// has caught up) and returns what the new node needs to start.
	AddMember(ctx context.Context, m MemberInfo) (JoinInfo, error)
	// RemoveMember removes the named member; refused with kv.ErrQuorumAtRisk
	// when the voters left could not form a quorum, unless force.
	RemoveMember(ctx context.Context, name string, force bool) error
	// TransferLeader hands leadership to the named voter ("" = the most
	// caught-up one) and returns the new leader.
	TransferLeader(ctx context.Context, to string) (MemberInfo, error)
	// Healthy reports, on the leader, which members answered within an
	// election timeout (nil on a follower: it does not know). A member a
	// new leader has not heard from yet is left out: unknown.
	Healthy() map[kv.NodeID]bool
}

// JoinInfo is the answer to POST /v1/cluster/members: the cluster a new
// member joins, as `kvd serve --join` needs it.
type JoinInfo struct {
	// ClusterID is checked by every peer's handshake (hex).
	ClusterID string `json:"cluster_id"`
	// ID is the new member's raft ID (hex).
	ID string `json:"id"`
	// Members are all members, the new one included, with peer addresses.
	Members []JoinMember `json:"members"`
	// BootstrapVoters is the configuration the cluster's log starts from
	// (hex IDs): the new member's empty log must start from the same one.
	BootstrapVoters []string `json:"bootstrap_voters"`
	// AddedAt is a raft index at or after the one that added the new
	// member (0 from a kvd that does not say). A member is removed if a
	// configuration applied at or after it leaves the member out; before
	// it, the member is a joiner not yet caught up.
	AddedAt uint64 `json:"added_at,omitempty"`
}

// JoinMember is one member in a JoinInfo.
type JoinMember struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	PeerAddr string `json:"peer_addr"`
	Witness  bool   `json:"witness,omitempty"`
}

// maxAdminBody bounds an admin request body.
const maxAdminBody = 64 << 10

// forwardedHeader marks a request one node passed to the leader, so it is
// never passed on again (a leader change mid-flight would bounce it).
const forwardedHeader = "X-Kvd-Forwarded-By"

func (a *api) adminRoutes() {
	a.routes["/v1/cluster/members"] = route{name: "cluster_members", methods: "GET POST", serve: a.members, noQuery: true}
	a.routes["/v1/cluster/transfer-leader"] = route{name: "cluster_transfer_leader", methods: "POST", serve: a.transferLeader, noQuery: true}
	a.routes["/v1/cluster/digest"] = route{name: "cluster_digest", methods: "GET", serve: a.digest, noQuery: true}
}

// ClusterDigest is the body of GET /v1/cluster/digest.
type ClusterDigest = kv.Digest

// digest answers this node's state fingerprint: replicas at the same
// applied index must agree on it.
func (a *api) digest(w http.ResponseWriter, r *http.Request) {
	d, err := a.svc.Digest()
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (a *api) members(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusOK, a.clusterStatus().Members)
		return
	}
	var m MemberInfo
	body, ok := readJSON(w, r, &m)
	if !ok {
		return
	}
	// The rule --name and --initial-cluster follow, so that every member,
	// however it came in, can be named in DELETE /v1/cluster/members/{name}.
	if err := config.CheckName(m.Name); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("name %q: %v", m.Name, err))
		return
	}
	if err := checkHostPort(m.PeerAddr); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "peer_addr: "+err.Error())
		return
	}
	if a.opts.Admin == nil {
		notImplemented(w)
		return
	}
	info, err := a.opts.Admin.AddMember(r.Context(), m)
	if err != nil {
		a.adminFail(w, r, body, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (a *api) removeMember(w http.ResponseWriter, r *http.Request, escaped string) {
	if r.Method != http.MethodDelete {
		methodNotAllowed(w, "DELETE")
		return
	}
	if refuseCrossSite(w, r) {
		return
	}
	// Any name that unescapes is looked up, not judged by config.CheckName: a
	// member named before that rule existed must stay removable. A raw '/'
	// is more path, not part of a name (clients escape it as %2F).
	name, err := url.PathUnescape(escaped)
	if err != nil || name == "" || strings.Contains(escaped, "/") {
		writeError(w, http.StatusBadRequest, "bad_request", "bad member name in path: want /v1/cluster/members/{name}, the name percent-encoded")
		return
	}
	q, e := parseQuery(r, "force")
	if e != nil {
		reject(w, e)
		return
	}
	force := false
	switch v := q.Get("force"); {
	case !q.Has("force"), v == "false", v == "0":
	case v == "true", v == "1":
		force = true
	default:
		// Empty too (?force): true or false is the client's to say.
		writeError(w, http.StatusBadRequest, "bad_request", "force: want true or false")
		return
	}
	if a.opts.Admin == nil {
		notImplemented(w)
		return
	}
	if err := a.opts.Admin.RemoveMember(r.Context(), name, force); err != nil {
		a.adminFail(w, r, nil, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": name})
}

func (a *api) transferLeader(w http.ResponseWriter, r *http.Request) {
	var req struct {
		To string `json:"to"`
	}
	body, ok := readJSON(w, r, &req)
	if !ok {
		return
	}
	if a.opts.Admin == nil {
		notImplemented(w)
		return
	}
	leader, err := a.opts.Admin.TransferLeader(r.Context(), req.To)
	if err != nil {
		a.adminFail(w, r, body, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"leader": leader.Name})
}

// readJSON decodes a bounded JSON body (an empty body is an empty object) and
// returns its bytes for forwarding. It is the gate of every state-changing
// admin POST, so it also refuses what a web page could send cross-site
// (refuseCrossSite) and any body not declared application/json: a browser
// sends a text/plain, form or bodiless POST from any page without asking
// the server first (no CORS preflight), while application/json needs a
// preflight, which kvd never grants.
func readJSON(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	if refuseCrossSite(w, r) {
		return nil, false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("Content-Type %q: this endpoint takes application/json", r.Header.Get("Content-Type")))
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "reading body: "+err.Error())
		return nil, false
	}
	if len(body) > maxAdminBody {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body exceeds %d bytes", maxAdminBody))
		return nil, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return body, true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "bad_json", "malformed JSON body: "+err.Error())
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, "bad_json", "malformed JSON body: more after the JSON object")
		return nil, false
	}
	return body, true
}

// refuseCrossSite answers 403 to a request a browser marks as sent by
// another site's page (Fetch Metadata) and reports whether it did. The
// content-type rule of readJSON already keeps such pages out; this also
// covers DELETE and whatever a browser bug might let through. Browsers
// alone send the header, so kvd's own clients and curl are unaffected.
func refuseCrossSite(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") != "cross-site" {
		return false
	}
	writeError(w, http.StatusForbidden, "cross_site", "cluster changes are refused from another site's web page (Sec-Fetch-Site: cross-site)")
	return true
}

func checkHostPort(s string) error {
	u, err := url.Parse("tcp://" + s)
	if err != nil || u.Hostname() == "" || u.Port() == "" || u.Host != s {
		return fmt.Errorf("%q is not host:port", s)
	}
	if n, err := strconv.ParseUint(u.Port(), 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: the port must be a number from 1 to 65535", s)
	}
	return nil
}

func notImplemented(w http.ResponseWriter) {
	writeError(w, http.StatusNotImplemented, "not_implemented", "this node does not manage membership")
}

// adminFail answers a failed admin operation. Only the leader can judge a
// membership change; a follower passes the request to it.
func (a *api) adminFail(w http.ResponseWriter, r *http.Request, body []byte, err error) {
	switch {
	case errors.Is(err, kv.ErrNotLeader):
		a.forwardToLeader(w, r, body)
	case errors.Is(err, kv.ErrUnknownMember):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, kv.ErrMemberExists):
		writeError(w, http.StatusConflict, "member_exists", err.Error())
	case errors.Is(err, kv.ErrVersionTooOld):
		writeError(w, http.StatusConflict, "version_too_old", err.Error())
	case errors.Is(err, kv.ErrClusterVersion):
		writeError(w, http.StatusConflict, "cluster_version", err.Error())
	case errors.Is(err, kv.ErrWitnessQuorum):
		writeError(w, http.StatusConflict, "witness_quorum", err.Error())
	case errors.Is(err, kv.ErrLastVoter):
		writeError(w, http.StatusConflict, "last_voter", err.Error())
	case errors.Is(err, kv.ErrWitnessTarget):
		writeError(w, http.StatusConflict, "witness", err.Error())
	case errors.Is(err, kv.ErrNoTransferTarget):
		// The cluster's state, not the request, is at fault: a 409 as for
		// the last voter, where a 400 read as a malformed request.
		writeError(w, http.StatusConflict, "no_transfer_target", err.Error())
	case errors.Is(err, kv.ErrQuorumAtRisk):
		writeError(w, http.StatusConflict, "quorum_at_risk",
			err.Error()+" (force it to remove the member anyway: ?force=true, kvd cluster remove --force)")
	case errors.Is(err, kv.ErrConfChangeTimeout):
		writeError(w, http.StatusServiceUnavailable, "timeout", err.Error())
	case errors.Is(err, kv.ErrRemoved):
		writeError(w, http.StatusGone, "removed", err.Error())
	case errors.Is(err, kv.ErrTransferring):
		writeError(w, http.StatusServiceUnavailable, "leader_transfer", err.Error())
	case errors.Is(err, kv.ErrChangeInProgress):
		writeError(w, http.StatusServiceUnavailable, "change_in_progress", err.Error())
	// ErrUnknownOutcome: the leader lost its leadership or stopped with the
	// change in flight; nothing is wrong with the request, and a retry is
	// answered truthfully (an add that committed as done, a removal that
	// did as not_found).
	case errors.Is(err, kv.ErrNoLeader), errors.Is(err, kv.ErrTimeout), errors.Is(err, kv.ErrStopped), errors.Is(err, kv.ErrUnknownOutcome),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		a.failErr(w, r, err)
	default:
		// Validation errors of the request itself (bad target and the like).
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
	}
}

func (a *api) forwardToLeader(w http.ResponseWriter, r *http.Request, body []byte) {
	// A leader publishes its HTTP address once it is ready; just after an
	// election or a cluster's start it may not have yet.
	var leader MemberInfo
	for wait := time.Now().Add(5 * time.Second); ; {
		st := a.svc.Status()
		if st.Leader != 0 && a.opts.Directory != nil {
			leader, _ = a.opts.Directory.Member(st.Leader)
		}
		if leader.HTTPAddr != "" || r.Header.Get(forwardedHeader) != "" || time.Now().After(wait) {
			break
		}
		select {
		case <-r.Context().Done():
			a.failErr(w, r, r.Context().Err())
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	if r.Header.Get(forwardedHeader) != "" || leader.HTTPAddr == "" {
		msg := "this node is not the leader and cannot reach it over HTTP"
		if leader.Name != "" {
			msg += "; send the request to the leader, " + leader.Name
		}
		writeError(w, http.StatusServiceUnavailable, "not_leader", msg)
		return
	}
	scheme := a.opts.Scheme
	if scheme == "" {
		scheme = "http"
	}
	target := scheme + "://" + leader.HTTPAddr + r.URL.RequestURI()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, target, bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "forward to leader: "+err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(forwardedHeader, a.opts.Self.Name)
	// The leader judges the client's credentials, not this member's: it
	// has the same --auth-file, and a member has no password of its own.
	if v := r.Header.Get("Authorization"); v != "" {
		req.Header.Set("Authorization", v)
	}
	hc := a.opts.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		writeError(w, http.StatusBadGateway, "leader_unreachable", "forward to leader "+leader.Name+": "+err.Error())
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Retry-After", "WWW-Authenticate"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
}
