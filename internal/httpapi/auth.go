package httpapi

import (
	"net/http"
)

// Authenticator checks HTTP Basic credentials against the --auth-file
// (*auth.Store implements it). Verify is called on every request that needs
// credentials, so it must be cheap on a repeat (the store caches bcrypt
// results); Failed is called for every refused one and must rate-limit
// whatever it logs, since anyone who reaches the port can cause one.
type Authenticator interface {
	// Verify reports whether password is user's.
	Verify(user, password string) bool
	// Failed reports a refused request from remote (host:port) naming
	// user ("" when none was sent); reason says why. Never the password.
	Failed(remote, user, reason string)
}

// openPaths are served without credentials when authentication is on (as
// is openRead): the read-only probes that orchestrators, load balancers and Prometheus call
// without a password. None of them reveals a key or a value.
var openPaths = map[string]bool{
	"/healthz":    true,
	"/readyz":     true,
	"/metrics":    true,
	"/v1/version": true,
}

// openRead: GET /v1/cluster, the member table (names, roles, addresses,
// raft progress; no key or value) is open too, because members ask each
// other for it to find the leader's peer address (membership's
// askPeerAddr), and members hold no password. Changes to the cluster,
// under /v1/cluster/…, need credentials.
func openRead(r *http.Request) bool {
	return r.URL.EscapedPath() == "/v1/cluster" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
}

// challenge is the WWW-Authenticate header of a 401. The charset tells
// browsers to send a non-ASCII user or password as UTF-8 (RFC 7617).
const challenge = `Basic realm="kvd", charset="UTF-8"`

// RequireAuth wraps h so that every request but those to the open paths
// needs credentials auth accepts. New applies the same rule itself; this is
// for handlers mounted beside the API (the profiler at /debug/pprof/). A nil
// auth returns h unchanged.
func RequireAuth(auth Authenticator, h http.Handler) http.Handler {
	if auth == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if authorized(auth, w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// authorized reports whether r may be served; when not, it has answered 401
// and reported the failure to auth.
func authorized(auth Authenticator, w http.ResponseWriter, r *http.Request) bool {
	if auth == nil || openPaths[r.URL.EscapedPath()] || openRead(r) {
		return true
	}
	user, password, ok := r.BasicAuth()
	var reason string
	switch {
	case !ok:
		reason = "no credentials"
	case !auth.Verify(user, password):
		reason = "wrong user or password"
	default:
		return true
	}
	auth.Failed(r.RemoteAddr, user, reason)
	w.Header().Set("WWW-Authenticate", challenge)
	// One message for both causes: which of user and password was wrong
	// is not the client's to learn.
	writeError(w, http.StatusUnauthorized, "unauthorized", "authentication required: HTTP Basic credentials of a user in the node's --auth-file")
	return false
}
