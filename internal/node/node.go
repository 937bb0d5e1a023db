// Package node is kvd's composition root: it opens the two Pebble stores,
// starts the raft member over them, and puts the kv service behind the
// memcache and HTTP listeners. Reading Start top to bottom is reading the data
// path: raftlog → fsm → replica → kv → listeners.
package node

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/mcserver"
	"github.com/kvd-project/kvd/internal/metrics"
	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/replica"
	"github.com/kvd-project/kvd/internal/transport"
)

// Node is one running kvd member.
type Node struct {
	cfg    config.Config
	logger *slog.Logger

	log   *raftlog.Log
	state *fsm.FSM
	rep   *replica.Replica
	peers *transport.TCP // nil for a group of one
	kv    *kv.Service
	mc    *mcserver.Server
	http  *http.Server

	mcLn, httpLn net.Listener
	stopSweep    context.CancelFunc
	serveErr     chan error

	// Membership: how the cluster began, what this node publishes, and the
	// transport's peers kept equal to raft's configuration.
	ms        *membership
	adv       advertised
	inbound   *replica.LateHandler
	sender    *lazySender
	peerMu    sync.Mutex
	peerAddrs map[uint64]string
	// learned is the leader raft follows, when neither its configuration
	// nor the member table gave its address and another member's did
	// (leaderaddr.go); 0: none. Under peerMu.
	learned   uint64
	stopWatch context.CancelFunc
	// versionHeld is why the leader last kept the cluster version where
	// it was (logged when it changes); owned by watchClusterVersion.
	versionHeld string
	watchDone   chan struct{}
	removed     chan struct{}
	removedOnce sync.Once
	// notMemberLogged: a leader's not-member refusal was logged at info.
	notMemberLogged atomic.Bool
}

// IDOf derives a member's raft ID from its name: stable across restarts and
// identical on every member that reads the same --initial-cluster.
func IDOf(name string) replica.NodeID {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	if id := h.Sum64(); id != 0 {
		return replica.NodeID(id)
	}
	return 1
}

// Start brings the node up and returns once its listeners are bound.
func Start(cfg config.Config, logger *slog.Logger) (*Node, error) {
	return StartContext(context.Background(), cfg, logger)
}

// StartContext is Start, abandoned when ctx ends: a SIGTERM while a joining
// node still waits for the member it asks to answer (which it retries for
// 15 seconds or more) stops it at once instead.
func StartContext(ctx context.Context, cfg config.Config, logger *slog.Logger) (n *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	n = &Node{cfg: cfg, logger: logger, serveErr: make(chan error, 2)}
	// Every failure below returns nil for n: the cleanup holds its own copy.
	built := n
	defer func() {
		if err != nil {
			// The expiry sweeper and the disk guard start before the
			// listeners bind; a failed listen must not leave them polling
			// a stopped node.
			if built.stopSweep != nil {
				built.stopSweep()
			}
			if built.stopWatch != nil {
				built.stopWatch()
			}
			built.closeStores()
		}
	}()
	// raftlog.Open creates the data dir and fsyncs every directory entry it
	// adds, so that a power loss cannot take the fresh directory back.

	// The durable log and the state it produces, each its own Pebble.
	logSync := metrics.NewSyncObserver() // fsync latency, observed from the first write on
	n.log, err = raftlog.Open(filepath.Join(cfg.DataDir, "raft"), logger, raftlog.Options{ObserveSync: logSync.Observe})
	if err != nil {
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	limit := fileLimit()
	storeFiles, short := storeFileBudget(limit, cfg.MaxConnections)
	if short {
		logger.Warn("the open-file limit is low for max-connections: raise it (ulimit -n, LimitNOFILE)",
			"limit", limit, "max_connections", cfg.MaxConnections, "want_at_least", uint64(cfg.MaxConnections)+fileReserve+minStoreFiles)
	}
	n.state, err = fsm.Open(filepath.Join(cfg.DataDir, "state"), logger.With("component", "fsm"), fsm.Options{
		CacheBytes: int64(cfg.CacheSize), ItemCacheBytes: itemCacheBytes(cfg.ItemCacheSize),
		MaxOpenFiles: storeFiles,
		// The log is compacted up to what the store holds on disk: flush at
		// least as often as the log is meant to be compacted.
		FlushAfterEntries: cfg.SnapshotCount,
		RetryPause:        func(failures uint64) { time.Sleep(retryBackoff(failures)) }})
	if err != nil {
		return nil, fmt.Errorf("open state store: %w", err)
	}

	// Consensus over them.
	rcfg := replica.Config{
		ID:             IDOf(cfg.Name),
		TickInterval:   cfg.HeartbeatInterval,
		ElectionTicks:  cfg.ElectionTicks(),
		HeartbeatTicks: 1,
		LeaseReads:     cfg.ReadConsistency == "lease",
		CompactEvery:   cfg.SnapshotCount,
		CompactKeep:    cfg.SnapshotCatchupEntries,
		MaxPending:     cfg.MaxPending,
	}
	if cfg.Join != "" && n.log.IsEmpty() && !exists(filepath.Join(cfg.DataDir, membershipFile)) {
		n.adv.peer = advertise(cfg.AdvertisePeerAddr, cfg.PeerAddr)
		n.adv.http = advertise(cfg.AdvertiseHTTPAddr, cfg.HTTPAddr)
		n.adv.memcache = advertise(cfg.AdvertiseMemcacheAddr, cfg.MemcacheAddr)
		logger.Info("joining cluster", "via", cfg.Join, "peer_addr", n.adv.peer)
		if _, err := joinCluster(ctx, cfg, n.adv, filepath.Join(cfg.DataDir, membershipFile)); err != nil {
			return nil, err
		}
	}
	ms, err := loadMembership(cfg, n.log.IsEmpty())
	if err != nil {
		return nil, fmt.Errorf("cluster membership: %w", err)
	}
	n.ms = ms
	if cfg.InitialCluster != "" && len(ms.Bootstrap) == 0 {
		// Only the first start reads --initial-cluster; a changed one is
		// ignored, which the operator who changed it should hear.
		if given, err := fromFlags(cfg); err == nil && given.ClusterID != ms.ClusterID {
			logger.Warn("initial-cluster differs from the one this data dir was founded with, and is ignored: membership changes go through kvd cluster add/remove",
				"initial_cluster", cfg.InitialCluster, "file", filepath.Join(cfg.DataDir, membershipFile))
		}
	}
	if cfg.Join != "" && len(ms.Bootstrap) == 0 {
		// A data dir that founded its own cluster stays in it: --join is
		// read only by an empty one (a joined member restarted with it is
		// the usual case, and quiet).
		logger.Warn("join is ignored: this data dir already holds a cluster it founded; to join another, start with an empty data dir",
			"join", cfg.Join, "file", filepath.Join(cfg.DataDir, membershipFile))
	}
	for _, v := range ms.bootstrapVoters() {
		rcfg.Peers = append(rcfg.Peers, replica.NodeID(v))
	}
	peers := map[uint64]string{}
	for _, m := range ms.Members {
		if m.ID != uint64(rcfg.ID) {
			peers[m.ID] = m.PeerAddr
		}
	}
	// A group of one binds no peer port until a member is added.
	n.inbound = &replica.LateHandler{}
	n.sender = &lazySender{}
	n.peerAddrs = maps.Clone(peers)
	n.removed = make(chan struct{})
	if len(peers) > 0 {
		if n.peers, err = n.newTransport(peers); err != nil {
			return nil, fmt.Errorf("peer transport: %w", err)
		}
		n.sender.t.Store(n.peers)
	}
	n.rep, err = replica.Start(rcfg, n.log, fsmAdapter{f: n.state, dataDir: cfg.DataDir}, n.sender, logger.With("component", "replica"))
	if err != nil {
		return nil, fmt.Errorf("start replica: %w", err)
	}
	n.inbound.Bind(n.rep)
	if n.peers != nil {
		n.peers.Start()
	}

	// The protocol-agnostic service, and the listeners in front of it.
	level, _ := kv.ParseConsistency(cfg.ReadConsistency)
	n.kv = kv.New(kv.Config{
		RequestTimeout:  cfg.RequestTimeout,
		MaxItemSize:     int(cfg.MaxItemSize),
		ReadConsistency: level,
	}, n.rep, n.state, logger.With("component", "kv"), time.Now)
	var sweepCtx context.Context
	sweepCtx, n.stopSweep = context.WithCancel(context.Background())
	// Refuse writes politely while the disk is nearly full: a write the
	// raft log cannot persist stops the node.
	if free := freeSpace(cfg.DataDir); cfg.MinFreeDisk > 0 && free != nil {
		g := kv.NewSpaceGuard(uint64(cfg.MinFreeDisk), free, logger.With("component", "disk"))
		g.Check()
		n.kv.GuardSpace(g)
		go g.Run(sweepCtx, time.Second)
	}
	go n.kv.RunExpirySweeper(sweepCtx)
	var watchCtx context.Context
	watchCtx, n.stopWatch = context.WithCancel(context.Background())

	n.mc = mcserver.New(mcserver.Config{
		Name:           cfg.Name,
		MemberName:     func(id kv.NodeID) string { m, _ := n.Member(id); return m.Name },
		MaxItemSize:    int(cfg.MaxItemSize),
		MaxConnections: cfg.MaxConnections,
	}, n.kv, logger.With("component", "memcache"))
	if n.mcLn, err = net.Listen("tcp", cfg.MemcacheAddr); err != nil {
		return nil, fmt.Errorf("listen memcache on %s: %w", cfg.MemcacheAddr, err)
	}
	if n.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		_ = n.mcLn.Close()
		return nil, fmt.Errorf("listen http on %s: %w", cfg.HTTPAddr, err)
	}
	n.adv = advertised{
		peer:     advertise(cfg.AdvertisePeerAddr, cfg.PeerAddr),
		http:     advertise(cfg.AdvertiseHTTPAddr, n.httpLn.Addr().String()),
		memcache: advertise(cfg.AdvertiseMemcacheAddr, n.mcLn.Addr().String()),
	}
	if len(ms.Members) > 0 && cfg.AdvertisePeerAddr == "" {
		// A founding member is reached where --initial-cluster says. A lone
		// node's entry is its --peer-addr, which may be a wildcard (the
		// container image's 0.0.0.0): a joining node dialled that and
		// reached itself, so the wildcard gives way to the host name.
		// Once --peer-addr has changed since the first start, the entry
		// names a port nobody listens on any more: the node published it
		// and its peers could no longer reach it.
		for _, m := range ms.Members {
			if m.ID != uint64(rcfg.ID) {
				continue
			}
			if ms.ListenPeerAddr == "" || ms.ListenPeerAddr == cfg.PeerAddr {
				n.adv.peer = advertise("", m.PeerAddr)
			} else {
				logger.Warn("peer-addr changed since the first start: advertising it instead of this member's --initial-cluster entry (set --advertise-peer-addr to choose)",
					"first_peer_addr", ms.ListenPeerAddr, "peer_addr", cfg.PeerAddr, "advertised", n.adv.peer)
			}
		}
	}
	// One metrics registry per node; its collectors read these counters at scrape time.
	reg := metrics.New(metrics.Sources{Raft: n.rep, Store: n.state, Log: n.log, Memcache: n.mc.Stats(), LogSync: logSync,
		Cluster: &metrics.ClusterSource{
			Snapshots: n.rep.SnapshotStats,
			Peers:     n.peerStats,
			PeerName:  func(id uint64) string { m, _ := n.Member(kv.NodeID(id)); return m.Name },
		}})
	var handler http.Handler = httpapi.New(n.kv, logger.With("component", "http"), httpapi.Options{
		Self:      httpapi.MemberInfo{Name: cfg.Name, PeerAddr: n.adv.peer, HTTPAddr: n.adv.http, MemcacheAddr: n.adv.memcache},
		Directory: n,
		Admin:     n,
		Metrics:   reg,
	})
	// The profiler stays outside the deadline: a trace streams for as long
	// as it was asked to run.
	handler = withWriteDeadline(handler, 2*cfg.RequestTimeout)
	if cfg.EnablePprof {
		handler = withPprof(handler)
	}
	n.http = &http.Server{
		Handler: handler,
		// --request-timeout bounds reading a request too: a client that
		// stalls mid-body would otherwise hold its handler, and the
		// graceful drain at shutdown, for ever.
		ReadHeaderTimeout: cfg.RequestTimeout,
		ReadTimeout:       cfg.RequestTimeout,
		IdleTimeout:       2 * time.Minute,
	}
	n.watchDone = make(chan struct{})
	go func() {
		defer close(n.watchDone)
		versionDone := make(chan struct{})
		go func() {
			defer close(versionDone)
			n.watchClusterVersion(watchCtx)
		}()
		n.watchMembers(watchCtx)
		<-versionDone
	}()
	go func() { n.serveErr <- n.mc.Serve(n.mcLn) }()
	go func() {
		if err := n.http.Serve(n.httpLn); !errors.Is(err, http.ErrServerClosed) {
			n.serveErr <- fmt.Errorf("http server: %w", err)
		}
	}()
	logger.Info("kvd node started", "name", cfg.Name, "id", fmt.Sprintf("%x", rcfg.ID),
		"memcache", n.mcLn.Addr().String(), "http", n.httpLn.Addr().String(), "data_dir", cfg.DataDir,
		"applied", n.state.AppliedIndex())
	return n, nil
}

// MemcacheAddr is the bound memcache address (useful with port 0).
func (n *Node) MemcacheAddr() string { return n.mcLn.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// KV exposes the service (for the HTTP API and tests).
func (n *Node) KV() *kv.Service { return n.kv }

// Run blocks until ctx ends (then shuts down gracefully) or the node fails.
func (n *Node) Run(ctx context.Context) error {
	var cause error
	select {
	case <-ctx.Done():
		n.logger.Info("shutting down", "reason", context.Cause(ctx))
	case <-n.rep.Done():
		cause = fmt.Errorf("replica stopped: %w", n.rep.Err())
	case err := <-n.serveErr:
		cause = err
	case <-n.removed:
		cause = fmt.Errorf("%w: shutting down (wipe its data dir to join again)", replica.ErrRemoved)
	}
	sctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	return errors.Join(cause, n.Shutdown(sctx))
}

// Shutdown stops accepting, lets in-flight requests finish (bounded by ctx),
// then stops raft and closes both stores cleanly (bounded by the shutdown
// timeout again).
func (n *Node) Shutdown(ctx context.Context) error {
	var errs []error
	if err := n.mc.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("memcache shutdown: %w", err))
	}
	// Requests in flight end within the request timeout; the drain gets
	// that long, so that what remains of ctx is left for the handoff.
	hctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout+time.Second)
	err := n.http.Shutdown(hctx)
	cancel()
	if err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", errors.Join(err, n.http.Close())))
	}
	n.stopSweep()
	n.stopWatch()
	<-n.watchDone // it reads the stores closed below
	n.handOffLeadership(ctx)
	// Stopping raft waits for the Ready loop, and closing the stores for
	// their last writes. A disk that refuses writes (full, or failing) can
	// hold either forever: the loop inside an apply that Pebble stalls
	// because its flushes fail, say. Past a bound of its own the node
	// gives up and reports it, and the process exits as after a crash,
	// which loses nothing acknowledged: the raft log was fsynced before
	// every reply, and it replays whatever the state store had not
	// flushed.
	closed := make(chan error, 1)
	go func() {
		n.rep.Stop()
		closed <- errors.Join(n.rep.Err(), n.closeStores())
	}()
	t := time.NewTimer(n.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case err := <-closed:
		errs = append(errs, err)
	case <-t.C:
		errs = append(errs, fmt.Errorf("raft and the stores did not stop within %v (is the disk refusing writes?); "+
			"leaving them as a crash would: the raft log replays what they had not written", n.cfg.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

// handOffLeadership moves leadership to another voter before a leader stops,
// so the cluster does not wait out an election timeout to find it gone.
func (n *Node) handOffLeadership(ctx context.Context) {
	st := n.rep.Status()
	if st.Role != "leader" || len(st.Voters) < 2 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*n.cfg.ElectionTimeout)
	defer cancel()
	start := time.Now()
	to, err := n.rep.TransferLeadership(ctx, 0)
	if err != nil {
		n.logger.Warn("leadership transfer before shutdown failed; the others will elect a leader", "err", err)
		return
	}
	n.logger.Info("transferred leadership before shutdown", "to", fmt.Sprintf("%x", to), "took", time.Since(start))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (n *Node) closeStores() error {
	var errs []error
	if n.rep != nil {
		n.rep.Stop()
	}
	n.peerMu.Lock()
	if n.peers != nil {
		errs = append(errs, n.peers.Close())
		n.peers = nil
	}
	n.peerMu.Unlock()
	if n.state != nil {
		errs = append(errs, n.state.Close())
		n.state = nil
	}
	if n.log != nil {
		errs = append(errs, n.log.Close())
		n.log = nil
	}
	return errors.Join(errs...)
}

// fsmAdapter presents the state machine in the replica's vocabulary.
type fsmAdapter struct {
	f *fsm.FSM
	// dataDir is where the transport stages received snapshots.
	dataDir string
}

// Apply hands the entries to the state machine, a configuration change as
// the member table's change (its context is the node's join format), and
// its results back as they are: the replica delivers them to their
// requests.
func (a fsmAdapter) Apply(ents []replica.Entry) ([]command.Result, error) {
	in := make([]fsm.Entry, len(ents))
	for i, e := range ents {
		in[i] = fsm.Entry{Index: e.Index, Data: e.Data}
		if e.Conf != nil {
			in[i].Member = memberChange(e.Conf)
		}
	}
	return a.f.Apply(in)
}

func (a fsmAdapter) AppliedIndex() uint64  { return a.f.AppliedIndex() }
func (a fsmAdapter) Sync() (uint64, error) { return a.f.Sync() }

// InstallSnapshot installs the state the transport received for a MsgSnap.
func (a fsmAdapter) InstallSnapshot(ref []byte, index uint64) error {
	dir, err := transport.IncomingSnapshotDir(a.dataDir, ref)
	if err != nil {
		return err
	}
	return a.f.InstallSnapshot(dir, index)
}

// withPprof serves Go's profiler under /debug/pprof/ in front of h; opt-in
// (--enable-pprof) because profiles reveal internals. Only that prefix is
// routed to pprof: every other path reaches h untouched (a ServeMux in front
// would clean and redirect keys such as "a//b").
func withPprof(h http.Handler) http.Handler {
	prof := http.NewServeMux()
	prof.HandleFunc("/debug/pprof/", pprof.Index)
	prof.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
	prof.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	prof.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			prof.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// withWriteDeadline bounds the writing of each response to d from its
// first byte, so that a client that never reads cannot hold a handler, and
// the value it was sending, for ever. Not the server's WriteTimeout: that
// counts from the request and would cut off handlers that wait long before
// they answer (a membership change forwarded to the leader, a CPU profile).
func withWriteDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}
		// The deadline the connection's previous response left: its last
		// bytes were written before this request was read.
		_ = dw.rc.SetWriteDeadline(time.Time{})
		defer dw.finish()
		h.ServeHTTP(dw, r)
	})
}

// deadlineWriter arms the connection's write deadline at the response's
// first write.
type deadlineWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	d     time.Duration
	armed bool
}

func (w *deadlineWriter) arm() {
	if !w.armed {
		w.armed = true
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	}
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish bounds what the server still writes once the handler returns (its
// buffered tail, often the whole of a small response) to d as well; the
// next request on the connection lifts it before its handler runs.
func (w *deadlineWriter) finish() {
	if !w.armed {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	}
}

// itemCacheBytes maps the flag (0: off) onto fsm.Options (0: default).
func itemCacheBytes(size config.Size) int64 {
	if size == 0 {
		return -1
	}
	return int64(size)
}

// retryBackoff is how long the state store waits before it retries a
// flush or compaction that failed failures times in a row (a full disk):
// 10 ms after the first failure, doubling up to half a second, so that a
// disk that frees up is written again within half a second and one that
// stays full costs a few attempts a second, not hundreds.
func retryBackoff(failures uint64) time.Duration {
	if failures == 0 {
		return 0
	}
	return min(10*time.Millisecond<<min(failures-1, 6), maxRetryBackoff)
}

const maxRetryBackoff = 500 * time.Millisecond
