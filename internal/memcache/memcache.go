// Package memcache gives memcache requests their meaning, once for every
// protocol: it maps each operation a codec decoded (mcproto.Request) onto
// the kv service (a log command to propose, or a read at the configured
// consistency), renders the outcome through the connection's encoder, and
// counts memcached's `stats` and kvd's per-command metrics.
//
// Service implements mcserver.Handler; the listener calls a connection's
// session from that connection's reader goroutine, and the renders of
// pending replies run on its writer goroutine. Stats are atomics read by
// `stats` and by internal/metrics at scrape time.
package memcache

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/auth"
	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/mcserver"
)

// KV is the kv service as memcache semantics use it (kv.Service).
type KV interface {
	// Submit proposes c; the Call is waited for when the reply is written.
	Submit(ctx context.Context, c *command.Command) (*kv.Call, error)
	// Barrier makes the following Gets linearizable at level.
	Barrier(ctx context.Context, level kv.Consistency) error
	Get(key []byte) (command.Item, bool, error)
	// Now is the cluster's time, which items' expiry is in (clusterclock):
	// a TTL shown to a client counts from it, not from this host's clock.
	Now() time.Time
	Config() kv.Config
	Status() kv.ReplicaStatus
	StoreStats() kv.StoreStats
	Space() *kv.SpaceGuard
	// ClusterVersion is the version the cluster applies (command's
	// package doc): the read marks wait for the one that applies them.
	ClusterVersion() uint64
}

// Config of the semantics.
type Config struct {
	// Witness, set on a witness, refuses every data command with
	// SERVER_ERROR and the sentence it returns, which names the data
	// members; version, verbosity, stats, quit and noop are answered.
	Witness func() string
	// MaxItemSize and MaxConnections are shown by `stats settings` (the
	// listener and the codecs enforce them).
	MaxItemSize    int
	MaxConnections int
	// Name is this member's name, shown by `stats raft`; empty: not shown.
	Name string
	// Auth, when set, makes every connection authenticate before anything
	// else (see auth.go for what memcached's rules are and how kvd
	// follows them); nil: no authentication, nothing changes.
	Auth *auth.Store
	// MemberName names a raft member by ID for `stats raft` (the node's
	// cluster directory); nil or "": the member is shown by ID only.
	MemberName func(id kv.NodeID) string
}

// Service is the memcache semantics of one node.
type Service struct {
	cfg   Config
	kv    KV
	stats *Stats
	log   *slog.Logger
	// statsBase holds the running totals as of the last `stats reset`,
	// by stat name, which `stats` subtracts: the counters themselves keep
	// counting, because the Prometheus metrics read them too.
	statsBase atomic.Pointer[map[string]uint64]
	// access batches this node's reads for meta's h and l.
	access *accessMarks
}

// New builds the semantics over a kv service.
func New(cfg Config, svc KV, logger *slog.Logger) *Service {
	return &Service{cfg: cfg, kv: svc, stats: newStats(), log: logger, access: newAccessMarks(svc)}
}

// Stats returns the counters (the listener's Counters included).
func (s *Service) Stats() *Stats { return s.stats }

// NewSession implements mcserver.Handler.
func (s *Service) NewSession(c *mcserver.Conn) mcserver.Session {
	ss := &session{s: s, c: c, enc: c.Encoder()}
	ss.menc, _ = ss.enc.(mcproto.MetaEncoder) // nil where no meta request can come
	ss.senc, _ = ss.enc.(mcproto.SASLEncoder) // nil where no SASL request can come
	ss.authed = s.cfg.Auth == nil
	ss.gatKeyBytes.Store(int64(s.cfg.MaxItemSize))
	return ss
}

// Observe implements mcserver.Handler: the per-operation latency histogram.
func (s *Service) Observe(op mcproto.Op, d time.Duration) { s.stats.observe(op, d) }
