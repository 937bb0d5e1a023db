// Package kv owns kvd's protocol-agnostic service: the memcache and HTTP
// listeners call it, never the replica or the state machine. It turns an
// operation into a stamped, encoded command, proposes it and hands back a Call
// to wait on; it picks the read path for each consistency level; and, on the
// leader, it sweeps expired items out through the log.
package kv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/replica"
)

// Consistency is a read path.
type Consistency uint8

const (
	// Linearizable reads see every write acknowledged before they started
	// (ReadIndex, or the leader's lease when the node runs with lease reads).
	Linearizable Consistency = iota
	// Local reads this node's state now: fast, possibly stale.
	Local
)

// ParseConsistency reads the names used by flags and query parameters.
func ParseConsistency(s string) (Consistency, error) {
	switch s {
	case "linearizable", "lease", "":
		return Linearizable, nil
	case "local":
		return Local, nil
	}
	return 0, fmt.Errorf("unknown consistency %q (want linearizable, lease or local)", s)
}

// Replica is the consensus module as the service uses it.
type Replica interface {
	// Propose queues data for the log, waiting for room until ctx ends
	// or deadline passes (replica.Replica.Propose).
	Propose(ctx context.Context, deadline time.Time, reqID uint64, data []byte) (*replica.Pending, error)
	ReadBarrier(ctx context.Context) error
	// ReadsAreLocal reports that local state is linearizable right now
	// with no barrier at all (the sole voter, leading).
	ReadsAreLocal() bool
	Status() replica.Status
}

// Store is the state machine's read side.
type Store interface {
	Get(key []byte, nowNs int64) (command.Item, bool, error)
	Stats() fsm.Stats
	ExpiredBefore(nowSec int64, limit int) ([]command.KeyCAS, error)
	FlushHorizons() (at, before int64)
	HiddenAfter(after []byte, steps int, maxBytes int64, nowNs int64) (hidden []command.KeyCAS, next []byte, err error)
	Digest() (fsm.Digest, error)
	// ClusterVersion is the replicated cluster version as applied here.
	ClusterVersion() uint64
}

// Errors beyond the replica's.
var (
	ErrNotReady = errors.New("node is not ready: no leader known or log not yet replayed")
	// ErrClusterVersion refuses a command that not every member applies
	// yet (command.MinClusterVersion): proposed, it would stop the members
	// that do not.
	ErrClusterVersion = errors.New("not every member runs a kvd that applies this operation yet")
	ErrInvalid        = errors.New("entry could not be applied")
)

// Config of the service.
type Config struct {
	// RequestTimeout bounds every operation from submission to result.
	RequestTimeout time.Duration
	// MaxItemSize bounds a value, including one built by append/prepend.
	MaxItemSize int
	// ReadConsistency is the default read path.
	ReadConsistency Consistency
	// ExpirySweepInterval is how often the leader looks for expired items.
	ExpirySweepInterval time.Duration
}

// Service is the kv service of one node.
type Service struct {
	cfg    Config
	r      Replica
	store  Store
	logger *slog.Logger
	now    func() time.Time
	nextID atomic.Uint64
	// space is nil while free space is not watched. Atomic: the node
	// starts the expiry sweeper, which submits, before it guards space.
	space atomic.Pointer[SpaceGuard]
	// crawl is the expiry sweeper's walk through the items for those a
	// delayed flush_all hides; only the sweeper's goroutine uses it.
	crawl flushCrawl
}

// flushCrawl is where the crawl for one flush time stands.
type flushCrawl struct {
	flushAt int64  // the flush time crawled for
	cursor  []byte // the last key read; nil: from the start
	done    bool   // every item was read once the flush time had come
	// readFrom is the commit index when the pass began: it reads nothing
	// before this node has applied that far. A leader just elected may not
	// have applied every write stamped before the flush's time yet, and a
	// pass that stepped over their keys would never delete them.
	readFrom uint64
}

// New builds the service. now is the cluster's time (clusterclock: the
// leader's clock carried in the log), which reads and the expiry sweeper
// judge by and proposals carry until the leader stamps them; apply never
// reads a clock, it uses the stamp.
func New(cfg Config, r Replica, store Store, logger *slog.Logger, now func() time.Time) *Service {
	s := &Service{cfg: cfg, r: r, store: store, logger: logger, now: now}
	var seed [8]byte
	_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails on supported platforms
	// Request IDs only need to be unique among this node's in-flight
	// proposals and distinct from other nodes' (their entries are applied
	// here too): a random 64-bit start makes a collision negligible.
	s.nextID.Store(binary.BigEndian.Uint64(seed[:]) | 1)
	return s
}

// Config returns the service configuration.
func (s *Service) Config() Config { return s.cfg }

// GuardSpace makes Submit refuse writes that add data while g says the disk
// is low. Call it before serving; it is safe while the sweeper runs.
func (s *Service) GuardSpace(g *SpaceGuard) { s.space.Store(g) }

// Space is the free-space guard, nil when there is none.
func (s *Service) Space() *SpaceGuard { return s.space.Load() }

// ClusterVersion is the cluster version this node has applied.
func (s *Service) ClusterVersion() uint64 { return s.store.ClusterVersion() }

// Call is a submitted write. It counts against --max-pending until its
// entry is applied (or its Wait gives up), waited for or not; a Call
// nobody waits for still takes effect, and its result is lost.
type Call struct {
	p        *replica.Pending
	deadline time.Time
}

// Submit stamps, encodes and proposes c. Calls submitted from one goroutine
// enter the log in submission order. The request timeout starts now.
func (s *Service) Submit(ctx context.Context, c *command.Command) (*Call, error) {
	if g := s.space.Load(); g != nil && g.Low() && !passesLowDisk(c.Op) {
		return nil, ErrNoSpace
	}
	if need := command.MinClusterVersion(c.Op); need > 1 {
		if cv := s.store.ClusterVersion(); cv < need {
			return nil, fmt.Errorf("%w: %s needs cluster version %d, the cluster is at %d", ErrClusterVersion, c.Op, need, cv)
		}
	}
	// The request timeout is this host's elapsed time, not the cluster's.
	deadline := time.Now().Add(s.cfg.RequestTimeout)
	c.ReqID = s.nextID.Add(1)
	if c.ReqID == 0 {
		c.ReqID = s.nextID.Add(1)
	}
	c.Stamp = s.now().UnixNano()
	if buildsValue(c) {
		c.MaxSize = uint32(s.cfg.MaxItemSize)
	}
	data, err := command.Encode(nil, c)
	if err != nil {
		return nil, fmt.Errorf("submit %s: %w", c.Op, err)
	}
	p, err := s.r.Propose(ctx, deadline, c.ReqID, data)
	if err != nil {
		return nil, err
	}
	return &Call{p: p, deadline: deadline}, nil
}

// buildsValue reports whether c builds its value from the stored one
// (append, prepend, and ms in those modes): its MaxSize bounds what it
// may build.
func buildsValue(c *command.Command) bool {
	switch c.Op {
	case command.OpAppend, command.OpPrepend, command.OpAppendCAS, command.OpPrependCAS:
		return true
	case command.OpMetaStore:
		return c.Mode == command.ModeAppend || c.Mode == command.ModePrepend
	}
	return false
}

// Wait returns the applied result, or an error: replica.ErrUnknownOutcome
// when the deadline passed with the write possibly applied.
func (c *Call) Wait(ctx context.Context) (command.Result, error) {
	r, err := c.p.Wait(ctx, c.deadline)
	if err != nil {
		return command.Result{}, err
	}
	if r.Status == command.StatusInvalid {
		return r, ErrInvalid
	}
	return r, nil
}

// Do submits c and waits for its result.
func (s *Service) Do(ctx context.Context, c *command.Command) (command.Result, error) {
	call, err := s.Submit(ctx, c)
	if err != nil {
		return command.Result{}, err
	}
	return call.Wait(ctx)
}

// Barrier makes a following Get linearizable at level.
func (s *Service) Barrier(ctx context.Context, level Consistency) error {
	if level == Local || s.r.ReadsAreLocal() {
		return nil // before the timer below: it costs more than the read
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	return s.r.ReadBarrier(ctx)
}

// Get reads one key from local state as of now; call Barrier first for a
// linearizable read (once for a whole multi-get).
func (s *Service) Get(key []byte) (command.Item, bool, error) {
	return s.store.Get(key, s.now().UnixNano())
}

// Now is the cluster's time (see New): what expiry is judged by.
func (s *Service) Now() time.Time { return s.now() }

// StoreStats returns the state machine's counters (items, bytes, disk).
func (s *Service) StoreStats() fsm.Stats { return s.store.Stats() }

// Digest fingerprints this node's state (see fsm.Digest).
func (s *Service) Digest() (Digest, error) { return s.store.Digest() }

// Ready reports whether the node may take requests (DESIGN decision 7).
func (s *Service) Ready() bool { return s.r.Status().Ready }

// Status exposes the replica status to listeners.
func (s *Service) Status() replica.Status { return s.r.Status() }

// RunExpirySweeper deletes expired items through the log while this node
// leads, until ctx ends. Followers only hide expired items on read.
func (s *Service) RunExpirySweeper(ctx context.Context) {
	interval := s.cfg.ExpirySweepInterval
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := s.r.Status()
		if st.Role != "leader" || !st.Ready {
			continue
		}
		if err := s.sweepOnce(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("expiry sweep", "err", err)
		}
		if err := s.crawlFlushed(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("sweep of items a delayed flush_all hides", "err", err)
		}
	}
}

const sweepBatch = 512

func (s *Service) sweepOnce(ctx context.Context) error {
	for range 64 { // bounded work per tick
		due, err := s.store.ExpiredBefore(s.now().Unix(), sweepBatch)
		if err != nil {
			return err
		}
		if len(due) == 0 {
			return nil
		}
		if _, err := s.Do(ctx, &command.Command{Op: command.OpExpire, Expired: due}); err != nil {
			return fmt.Errorf("propose expiry of %d items: %w", len(due), err)
		}
		if len(due) < sweepBatch {
			return nil
		}
	}
	return nil
}

// crawlSteps and crawlBytes bound the items and the bytes the crawl reads
// per call, and crawlCalls the calls per tick: about 16k items or 32 MiB a
// second, so that a million small items hidden by one delayed flush_all
// are deleted within a minute or two, and a tick never holds the sweeper,
// or the disk, for long. crawlWindow bounds how long after a flush's time
// a leader crawls for it: each new leader crawls again (where the last one
// got to is not replicated), and a flush_all long past must not make every
// election read the whole store.
const (
	crawlSteps  = 4096
	crawlBytes  = 8 << 20
	crawlCalls  = 4
	crawlWindow = time.Hour
)

// crawlFlushed deletes, through the log, the items a delayed flush_all hides
// now that its time has come. They are in no index: memcached leaves them to
// its LRU crawler, and kvd, which evicts nothing, would otherwise keep them
// on disk and in curr_items until each key is written again. One pass over
// the items per flush time; a new leader starts its own. The pass starts a
// request timeout after the flush's time: a write proposed on a node whose
// clock lags may still be stamped before it, and is hidden as soon as it is
// stored.
//
// Until the last flush time's pass may start, the pass is for the passed
// flush time that one replaced, if any (fsm.FlushHorizons): what it hides
// is hidden for good, and a last flush time a day away would otherwise
// keep it on disk until then. So it is too when that replaced time is the
// later one (a flush_all given an absolute time already past, from cluster
// version 2): a pass for the later time finds everything either hides, and
// the earlier one may be past the crawl's window, which would leave what
// both hide on disk for good.
func (s *Service) crawlFlushed(ctx context.Context) error {
	flushAt, before := s.store.FlushHorizons()
	now := s.now().UnixNano()
	if flushAt == 0 {
		s.crawl = flushCrawl{} // an immediate flush_all deleted everything
		return nil
	}
	if before != 0 && (now < flushAt+int64(s.cfg.RequestTimeout) || before > flushAt) {
		flushAt = before
	}
	start := flushAt + int64(s.cfg.RequestTimeout)
	if now < start || now > start+int64(crawlWindow) {
		return nil
	}
	st := s.r.Status() // read after now, so its commit index covers every entry committed by start
	if s.crawl.flushAt != flushAt {
		s.crawl = flushCrawl{flushAt: flushAt, readFrom: st.Commit}
	}
	if st.Applied < s.crawl.readFrom {
		return nil
	}
	for range crawlCalls {
		if s.crawl.done {
			return nil
		}
		hidden, next, err := s.store.HiddenAfter(s.crawl.cursor, crawlSteps, crawlBytes, now)
		if err != nil {
			return err
		}
		for len(hidden) > 0 {
			n := min(len(hidden), sweepBatch)
			if _, err := s.Do(ctx, &command.Command{Op: command.OpExpire, Expired: hidden[:n]}); err != nil {
				return fmt.Errorf("propose deletion of %d items: %w", n, err)
			}
			hidden = hidden[n:]
		}
		s.crawl.cursor, s.crawl.done = next, next == nil
	}
	return nil
}

// Digest fingerprints the state at one applied index. Like StoreStats, it
// is a report of the store for operators, which the HTTP listener hands on
// as it is: named here so that listeners need not import the store.
type Digest = fsm.Digest

// The errors a request can end with. The replica defines them where they
// arise; they are named here too because kv is the listeners' only door to
// the node (they never import the replica), and each listener maps this
// vocabulary onto its protocol's answers. Beyond these: ErrNotReady,
// ErrInvalid and ErrNoSpace.
var (
	ErrNoLeader       = replica.ErrNoLeader
	ErrBusy           = replica.ErrBusy
	ErrTimeout        = replica.ErrTimeout
	ErrUnknownOutcome = replica.ErrUnknownOutcome
	ErrStopped        = replica.ErrStopped
)

// Errors of membership operations.
var (
	ErrNotLeader         = replica.ErrNotLeader
	ErrTransferring      = replica.ErrTransferring
	ErrChangeInProgress  = replica.ErrChangeInProgress
	ErrUnknownMember     = replica.ErrUnknownMember
	ErrMemberExists      = replica.ErrMemberExists
	ErrQuorumAtRisk      = replica.ErrQuorumAtRisk
	ErrLastVoter         = replica.ErrLastVoter
	ErrNoTransferTarget  = replica.ErrNoTransferTarget
	ErrWitnessTarget     = replica.ErrWitnessTarget
	ErrRemoved           = replica.ErrRemoved
	ErrConfChangeTimeout = replica.ErrConfChangeTimeout
	// ErrWitnessQuorum refuses a change after which the witnesses would
	// be as many as the data members, or more (docs/witness.md).
	ErrWitnessQuorum = errors.New("the data members must outnumber the witnesses")
	// ErrWitness answers a data request sent to a witness, which holds no
	// data.
	ErrWitness = errors.New("this member is a witness: it holds no data")
	// ErrVersionTooOld refuses a joining member whose kvd cannot apply
	// the cluster's version (command.ClusterVersionMax).
	ErrVersionTooOld = errors.New("the joining member's kvd cannot apply this cluster's version; run a newer release on it")
)
