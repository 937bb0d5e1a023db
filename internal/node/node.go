// Package node is kvd's composition root: it opens the raft log (raftlog's
// segment files under raft/) and the state store (Pebble under state/),
// builds the raft member over them with the membership control plane
// (internal/membership) beside it, and puts the kv service behind the
// memcache and HTTP listeners. Reading Start top to bottom is reading the data
// path: raftlog → fsm → replica → kv → listeners. Besides the wiring it keeps
// only what is about this process: the open-file budget, free-space probing,
// the HTTP write deadline and profiler, and the leadership handoff at
// shutdown.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvd-project/kvd/internal/clusterclock"
	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/failpoint"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/mcproto/ascii"
	"github.com/kvd-project/kvd/internal/mcproto/binary"
	"github.com/kvd-project/kvd/internal/mcserver"
	"github.com/kvd-project/kvd/internal/membership"
	"github.com/kvd-project/kvd/internal/memcache"
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
	// clock is the cluster's time: what reads and expiry are judged by,
	// and, as leader, what this node stamps the log with.
	clock *clusterclock.Clock
	kv    *kv.Service
	// memcache gives requests their meaning; mc is its listener.
	memcache *memcache.Service
	mc       *mcserver.Server
	http     *http.Server
	// members is the membership control plane; it owns the peer transport.
	members *membership.Controller

	mcLn, httpLn net.Listener
	stopSweep    context.CancelFunc
	serveErr     chan error
	stopWatch    context.CancelFunc
	watchDone    chan struct{}
	// reloaders re-read certificate and credential files (Reload).
	reloaders []func() error
}

// IDOf derives a member's raft ID from its name (membership.IDOf).
func IDOf(name string) replica.NodeID { return membership.IDOf(name) }

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
	n = &Node{cfg: cfg, logger: logger, serveErr: make(chan error, 2), clock: clusterclock.New(failpoint.Now)}
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
	witness := cfg.IsWitness()
	if err := checkRole(cfg.DataDir, witness); err != nil {
		return nil, err
	}
	// Certificates before any data file: a bad one fails the start with
	// nothing touched.
	clientCerts, clientTLSConfig, err := clientTLS(cfg, logger.With("component", "tls"))
	if err != nil {
		return nil, err
	}
	peerTLS, err := loadPeerTLS(cfg, logger) // mutual TLS between members
	if err != nil {
		return nil, err
	}
	creds, httpAuth, err := openAuth(cfg, logger)
	if err != nil {
		return nil, err
	}
	warnInsecure(cfg, logger)
	memberHTTP, err := membership.NewHTTP(cfg, clientCerts)
	if err != nil {
		return nil, err
	}
	if cfg.ForceNewCluster {
		// Before raftlog.Open creates the log: a refused start leaves the
		// dir as it found it.
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "raft")); errors.Is(err, os.ErrNotExist) {
			return nil, errForceEmpty
		}
	}

	// The durable log (segment files) and the state it produces (Pebble).
	logSync := metrics.NewSyncObserver() // fsync latency, observed from the first write on
	lopts := raftlog.Options{ObserveSync: logSync.Observe}
	if witness {
		// A witness's entries are a few dozen bytes each (it drops data
		// payloads): small segments keep its disk small too.
		lopts.SegmentBytes, lopts.SpareSegments, lopts.TailCacheBytes = witnessSegmentBytes, 1, witnessSegmentBytes
	}
	n.log, err = raftlog.Open(filepath.Join(cfg.DataDir, "raft"), logger, lopts)
	if err != nil {
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	if cfg.ForceNewCluster && n.log.IsEmpty() {
		return nil, errForceEmpty
	}
	limit := fileLimit()
	storeFiles, short := storeFileBudget(limit, cfg.MaxConnections)
	if short {
		logger.Warn("the open-file limit is low for max-connections: raise it (ulimit -n, LimitNOFILE)",
			"limit", limit, "max_connections", cfg.MaxConnections, "want_at_least", uint64(cfg.MaxConnections)+fileReserve+minStoreFiles)
	}
	fopts := fsm.Options{
		CacheBytes: int64(cfg.CacheSize), ItemCacheBytes: itemCacheBytes(cfg.ItemCacheSize),
		MaxOpenFiles: storeFiles,
		// The log is compacted up to what the store holds on disk: flush at
		// least as often as the log is meant to be compacted.
		FlushAfterEntries: cfg.SnapshotCount,
		RetryPause:        func(failures uint64) { time.Sleep(retryBackoff(failures)) }}
	if witness {
		// The member table and a few counters: no cache is worth its memory.
		fopts.Witness, fopts.CacheBytes, fopts.ItemCacheBytes = true, witnessCacheBytes, -1
	}
	n.state, err = fsm.Open(filepath.Join(cfg.DataDir, storeDir(witness)), logger.With("component", "fsm"), fopts)
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
		Witness:        witness,
		// Asked only once the loop runs, after members is set below. Not
		// through n, which a failed start sets to nil while the loop runs.
		IsWitness: func(id replica.NodeID) bool { return built.members.IsWitness(id) },
		// Only the leader's clock stamps the log (clusterclock).
		Stamp: func(data []byte) { command.SetStamp(data, n.clock.Stamp()) },
	}
	// Who the members are: cluster.json, written at the first start (from
	// --initial-cluster, or from the answer to --join).
	ms, err := membership.Open(ctx, cfg, n.log.IsEmpty(), memberHTTP, logger)
	if err != nil {
		return nil, err
	}
	if ms.Witness != witness {
		return nil, roleMismatch(cfg.DataDir, ms.Witness)
	}
	if cfg.ForceNewCluster {
		// Before the replica reads the log: it starts from the forced one.
		if err := forceNewCluster(cfg, n.log, ms, n.state, logger); err != nil {
			return nil, err
		}
	}
	for _, v := range ms.BootstrapVoters() {
		rcfg.Peers = append(rcfg.Peers, replica.NodeID(v))
	}
	n.rep, err = replica.New(rcfg, n.log, fsmAdapter{f: n.state, dataDir: cfg.DataDir, clock: n.clock}, logger.With("component", "replica"))
	if err != nil {
		return nil, fmt.Errorf("open replica: %w", err)
	}
	// The control plane makes the peer transport, delivering to the
	// replica, and is the replica's sender.
	n.members, err = membership.New(membership.Config{
		Name:           cfg.Name,
		RequestTimeout: cfg.RequestTimeout,
		Transport: transport.Config{LocalID: uint64(rcfg.ID), ListenAddr: cfg.PeerAddr,
			// Snapshots are staged in the data dir, beside state/ they replace.
			Snapshots: snapshotSource{n}, SnapshotDir: cfg.DataDir,
			TLS: peerTLS, IDOf: memberID},
		Handler: n.rep,
		HTTP:    memberHTTP,
	}, ms, n.rep, n.state, logger)
	if err != nil {
		return nil, err
	}
	if err := n.rep.Start(n.members); err != nil {
		return nil, err
	}
	n.members.StartPeers()

	// The protocol-agnostic service, and the listeners in front of it.
	level, _ := kv.ParseConsistency(cfg.ReadConsistency)
	n.kv = kv.New(kv.Config{
		RequestTimeout:  cfg.RequestTimeout,
		MaxItemSize:     int(cfg.MaxItemSize),
		ReadConsistency: level,
	}, n.rep, n.state, logger.With("component", "kv"), n.clock.Now)
	var sweepCtx context.Context
	sweepCtx, n.stopSweep = context.WithCancel(context.Background())
	// Refuse writes politely while the disk is nearly full: a write the
	// raft log cannot persist stops the node.
	if free := freeSpace(cfg.DataDir); cfg.MinFreeDisk > 0 && free != nil && !witness {
		g := kv.NewSpaceGuard(uint64(cfg.MinFreeDisk), free, logger.With("component", "disk"))
		g.Check()
		n.kv.GuardSpace(g)
		go g.Run(sweepCtx, time.Second)
	}
	if !witness {
		go n.kv.RunExpirySweeper(sweepCtx)
	}
	if peerTLS != nil {
		// A certificate renewed in place applies to the next peer
		// connection without a signal; stopped with the sweeper.
		n.watchFiles(sweepCtx, peerTLS.Source())
	}
	var watchCtx context.Context
	watchCtx, n.stopWatch = context.WithCancel(context.Background())

	if creds != nil {
		go creds.Run(watchCtx) // reloads on change; stopWatch ends it
		n.reloaders = append(n.reloaders, creds.Reload)
	}
	n.memcache = memcache.New(memcache.Config{
		Auth:           creds,
		Name:           cfg.Name,
		MemberName:     func(id kv.NodeID) string { m, _ := n.members.Member(id); return m.Name },
		Witness:        n.witnessRefusal(witness, false),
		MaxItemSize:    int(cfg.MaxItemSize),
		MaxConnections: cfg.MaxConnections,
	}, n.kv, logger.With("component", "memcache"))
	n.mc = mcserver.New(mcserver.Config{
		MaxItemSize:      int(cfg.MaxItemSize),
		MaxConnections:   cfg.MaxConnections,
		HandshakeTimeout: cfg.RequestTimeout,
	}, mcserver.Codecs{Text: ascii.Open, Binary: binary.Open},
		n.memcache, &n.memcache.Stats().Counters, logger.With("component", "memcache"))
	if n.mcLn, err = net.Listen("tcp", cfg.MemcacheAddr); err != nil {
		return nil, fmt.Errorf("listen memcache on %s: %w", cfg.MemcacheAddr, err)
	}
	if n.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		_ = n.mcLn.Close()
		return nil, fmt.Errorf("listen http on %s: %w", cfg.HTTPAddr, err)
	}
	n.mcLn, n.httpLn = listenTLS(n.mcLn, clientTLSConfig), listenTLS(n.httpLn, clientTLSConfig)
	if clientCerts != nil {
		n.watchFiles(watchCtx, clientCerts)
	}
	adv := ms.Advertise(cfg, n.httpLn.Addr().String(), n.mcLn.Addr().String(), logger)
	// One metrics registry per node; its collectors read these counters at scrape time.
	reg := metrics.New(metrics.Sources{Raft: n.rep, Store: n.state, Log: n.log, Memcache: n.memcache.Stats(), LogSync: logSync,
		Cluster: &metrics.ClusterSource{
			Snapshots: n.rep.SnapshotStats,
			Peers:     n.members.PeerStats,
			PeerName:  func(id uint64) string { m, _ := n.members.Member(kv.NodeID(id)); return m.Name },
		},
		ClockSkew: n.clock.Skew})
	var handler http.Handler = httpapi.New(n.kv, logger.With("component", "http"), httpapi.Options{
		Self:      httpapi.MemberInfo{Name: cfg.Name, PeerAddr: adv.Peer, HTTPAddr: adv.HTTP, MemcacheAddr: adv.Memcache, Witness: witness},
		Directory: n.members,
		Admin:     n.members,
		Metrics:   reg,
		Witness:   n.witnessRefusal(witness, true),
		Snapshots: newBackupSource(n),
		Client:    memberHTTP.Client,
		Scheme:    memberHTTP.Scheme,
		Auth:      httpAuth,
	})
	// The profiler stays outside the deadline: a trace streams for as long
	// as it was asked to run.
	handler = withWriteDeadline(handler, 2*cfg.RequestTimeout)
	if cfg.EnablePprof {
		handler = withPprof(handler, httpAuth)
	}
	n.http = &http.Server{
		Handler: handler,
		// --request-timeout bounds reading a request too: a client that
		// stalls mid-body would otherwise hold its handler, and the
		// graceful drain at shutdown, for ever.
		ReadHeaderTimeout: cfg.RequestTimeout,
		ReadTimeout:       cfg.RequestTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          httpErrorLog(logger.With("component", "http")),
	}
	n.watchDone = make(chan struct{})
	go func() {
		defer close(n.watchDone)
		n.members.Run(watchCtx, adv, n.kv)
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
	case <-n.members.Removed():
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

func (n *Node) closeStores() error {
	var errs []error
	if n.rep != nil {
		n.rep.Stop()
	}
	if n.members != nil {
		errs = append(errs, n.members.Close())
	}
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
	// clock learns the cluster's time from the stamps applied.
	clock *clusterclock.Clock
}

// Apply hands the entries to the state machine, a configuration change as
// the member table's change (its context is the node's join format), and
// its results back as they are: the replica delivers them to their
// requests.
func (a fsmAdapter) Apply(ents []replica.Entry) ([]command.Result, error) {
	in := make([]fsm.Entry, len(ents))
	var stamp int64
	for i, e := range ents {
		in[i] = fsm.Entry{Index: e.Index, Data: e.Data}
		if e.Conf != nil {
			in[i].Member = memberChange(e.Conf)
		} else if st, ok := command.StampOf(e.Data); ok {
			stamp = max(stamp, st)
		}
	}
	res, err := a.f.Apply(in)
	if err == nil && a.clock != nil { // nil in tests of the stack alone
		a.clock.Observe(stamp)
	}
	return res, err
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
func withPprof(h http.Handler, auth httpapi.Authenticator) http.Handler {
	prof := http.NewServeMux()
	prof.HandleFunc("/debug/pprof/", pprof.Index)
	prof.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
	prof.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	prof.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			httpapi.RequireAuth(auth, prof).ServeHTTP(w, r)
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
