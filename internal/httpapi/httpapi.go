// Package httpapi owns kvd's HTTP listener: health (/healthz), readiness
// (/readyz), the key-value API (/v1/kv), cluster status (/v1/cluster),
// Prometheus metrics (/metrics), the console's stats feed (/v1/stats), the
// release and cluster versions (/v1/version) and the web console (/).
// Every error is a JSON body {"error": "...", "code": "..."} with the status
// code that names its class: a client mistake is never a 500.
//
// The node's composition root builds the handler with New. It reads and
// writes keys through the Service interface, which *kv.Service implements,
// and reaches the cluster through Directory (members' names and addresses)
// and Admin (membership and leadership changes), which the node implements;
// never the replica or the state machine. net/http calls it, one goroutine
// per request.
//
// One class of bad input never reaches this package: a request line net/http
// itself cannot parse (for example bad percent-encoding in the path) is
// answered by net/http with a plain-text 400. Bad percent-encoding in the
// query string does reach us and gets a JSON 400, and so does a query
// parameter an endpoint does not take. Two kinds of path take any query and
// ignore what they do not know: /metrics, because Prometheus scrape configs
// may add parameters of their own, and the console's pages and assets, which
// browsers may load with cache-busting ones.
//
// With Options.Auth set (kvd serve --auth-file), every request needs HTTP
// Basic credentials, answered 401 unauthorized with a WWW-Authenticate
// challenge without them, except the read-only health and scrape endpoints
// /healthz, /readyz, /metrics and /v1/version, which probes and Prometheus
// call without a password and which reveal no key or value, and GET
// /v1/cluster, the member table, which members ask each other for. The console is
// covered too: the browser asks for the credentials at the first 401 and
// sends them again on the console's own requests, which are same-origin.
// An admin request a follower forwards to the leader carries the client's
// Authorization header on.
package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/metrics"
)

// Service is the kv service as the HTTP API uses it (*kv.Service).
type Service interface {
	Do(ctx context.Context, c *command.Command) (command.Result, error)
	Barrier(ctx context.Context, level kv.Consistency) error
	Get(key []byte) (command.Item, bool, error)
	List(ctx context.Context, level kv.Consistency, prefix, after []byte, limit int) ([]command.ScanItem, error)
	Status() kv.ReplicaStatus
	StoreStats() kv.StoreStats
	Config() kv.Config
	Digest() (kv.Digest, error)
}

// Metrics is the node's registry as the HTTP API uses it (*metrics.Registry).
type Metrics interface {
	// Handler serves /metrics.
	Handler() http.Handler
	// ObserveHTTP records one finished request; route and method come from
	// fixed sets.
	ObserveHTTP(route, method string, code int, d time.Duration)
	// InFlightHTTP adds delta to the in-flight request gauge.
	InFlightHTTP(delta int)
	// CountRequest counts a key-value request by protocol, command, result.
	CountRequest(protocol, command, result string)
	// Totals are the running totals the console charts.
	Totals() metrics.Totals
}

// MemberInfo is what the cluster directory knows about a member beyond its
// raft ID. Empty fields are unknown and left out of /v1/cluster.
type MemberInfo struct {
	Name         string `json:"name,omitempty"`
	PeerAddr     string `json:"peer_addr,omitempty"`
	HTTPAddr     string `json:"http_addr,omitempty"`
	MemcacheAddr string `json:"memcache_addr,omitempty"`
	// Witness marks a witness: a voter that holds no data (docs/witness.md).
	Witness bool `json:"witness,omitempty"`
	// MaxClusterVersion is, in a join request, the highest cluster version
	// the joining member's kvd applies (0: not said, as by kvd cluster add
	// or a kvd from before cluster versions).
	MaxClusterVersion uint64 `json:"max_cluster_version,omitempty"`
}

// Directory maps raft IDs to names and addresses. Multi-node clusters provide
// one (from --initial-cluster and membership changes); until then only this
// node's own name is known.
type Directory interface {
	Member(id kv.NodeID) (MemberInfo, bool)
}

// Options configures the handler; every field is optional.
type Options struct {
	// Self describes this node (its name at least) in /v1/cluster.
	Self MemberInfo
	// Directory names the other members; nil: they are shown by ID only.
	Directory Directory
	// Metrics enables /metrics and request instrumentation.
	Metrics Metrics
	// Admin enables membership and leadership changes.
	Admin Admin
	// Witness, set on a witness, refuses every data request (/v1/kv) with
	// 421 and the sentence it returns, which names the data members.
	Witness func() string
	// Snapshots enables GET /v1/snapshot (snapshot.go).
	Snapshots Snapshots
	// Auth, when set, requires HTTP Basic credentials on every endpoint
	// but the open ones (see the package doc); nil: no authentication.
	Auth Authenticator
	// Client makes the requests this node sends another member (an admin
	// request forwarded to the leader); nil: http.DefaultClient. With TLS
	// on the HTTP listeners it must trust the members' certificates, and
	// present a client certificate when they require one.
	Client *http.Client
	// Scheme is the members' HTTP scheme: "https" when their listeners
	// speak TLS (--cert-file), else "" or "http".
	Scheme string
}

// Limits of the API.
const (
	// MaxListLimit bounds one page of GET /v1/kv.
	MaxListLimit = 1000
	// DefaultListLimit is a page's size when the request names none.
	DefaultListLimit = 100
)

type api struct {
	svc    Service
	logger *slog.Logger
	opts   Options
	routes map[string]route
}

// route is one fixed path: a metrics label, the methods it takes and its
// handler. HEAD is served wherever GET is.
type route struct {
	name    string
	methods string // space separated, for the Allow header
	serve   func(http.ResponseWriter, *http.Request)
	// noQuery: the endpoint takes no query parameters, and the router
	// refuses a request with any. Endpoints that take some check their own.
	noQuery bool
}

// New returns the HTTP handler of one node.
func New(svc Service, logger *slog.Logger, opts Options) http.Handler {
	a := &api{svc: svc, logger: logger, opts: opts}
	a.routes = map[string]route{
		"/healthz":    {name: "healthz", methods: "GET", serve: a.healthz, noQuery: true},
		"/readyz":     {name: "readyz", methods: "GET", serve: a.readyz, noQuery: true},
		"/v1/kv":      {name: metrics.RouteKVList, methods: "GET", serve: a.list},
		"/v1/cluster": {name: "cluster", methods: "GET", serve: a.cluster, noQuery: true},
		"/v1/stats":   {name: "stats", methods: "GET", serve: a.stats, noQuery: true},
		"/v1/version": {name: "version", methods: "GET", serve: a.version, noQuery: true},
	}
	if opts.Metrics != nil {
		h := opts.Metrics.Handler()
		a.routes["/metrics"] = route{name: "metrics", methods: "GET", serve: h.ServeHTTP}
	}
	a.adminRoutes()
	a.snapshotRoutes()
	for path, serve := range consoleRoutes() {
		a.routes[path] = route{name: "console", methods: "GET", serve: serve}
	}
	return a
}

// ServeHTTP routes one request and records it.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	name := "not_found"
	if a.opts.Metrics != nil {
		a.opts.Metrics.InFlightHTTP(1)
		defer func() {
			a.opts.Metrics.InFlightHTTP(-1)
			a.opts.Metrics.ObserveHTTP(name, methodLabel(r.Method), rec.code(), time.Since(start))
		}()
	}
	path := r.URL.EscapedPath()
	if !authorized(a.opts.Auth, rec, r) {
		name = "unauthorized"
		return
	}
	if a.opts.Witness != nil && (path == "/v1/kv" || strings.HasPrefix(path, kvPrefix) || path == "/v1/cluster/digest") {
		name = metrics.RouteKV
		// 421 Misdirected Request: this member will never answer it,
		// however often it is retried; the data members will.
		writeError(rec, http.StatusMisdirectedRequest, "witness", a.opts.Witness())
		return
	}
	if key, ok := strings.CutPrefix(path, kvPrefix); ok {
		name = metrics.RouteKV
		a.serveKey(rec, r, key)
		return
	}
	if member, ok := strings.CutPrefix(path, "/v1/cluster/members/"); ok {
		name = "cluster_members"
		a.removeMember(rec, r, member)
		return
	}
	rt, ok := a.routes[path]
	if !ok {
		writeError(rec, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
		return
	}
	name = rt.name
	if !allowed(rt.methods, r.Method) {
		methodNotAllowed(rec, rt.methods)
		return
	}
	if rt.noQuery {
		if _, e := parseQuery(r); e != nil {
			reject(rec, e)
			return
		}
	}
	rt.serve(rec, r)
}

func allowed(methods, m string) bool {
	if m == http.MethodHead {
		m = http.MethodGet
	}
	for _, x := range strings.Fields(methods) {
		if x == m {
			return true
		}
	}
	return false
}

func methodNotAllowed(w http.ResponseWriter, methods string) {
	allow := strings.ReplaceAll(methods, " ", ", ")
	if allowed(methods, http.MethodGet) {
		allow += ", HEAD"
	}
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed; allowed: "+allow)
}

// methodLabel keeps the metrics label set fixed whatever method a client sends.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodPost, http.MethodOptions, http.MethodPatch:
		return m
	}
	return "other"
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	st := a.svc.Status()
	body := map[string]any{"ready": st.Ready, "leader": st.Leader != 0, "applied": st.Applied, "commit": st.Commit}
	if !st.Ready {
		body["reason"] = kv.ErrNotReady.Error()
		w.Header().Set("Retry-After", "1") // as on every other 503
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
