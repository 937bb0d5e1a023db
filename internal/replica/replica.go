// Package replica owns kvd's consensus: it is the only package that imports
// the raft algorithm (go.etcd.io/raft/v3). One goroutine, the Ready loop, owns
// the raft.RawNode and handles every Ready in this order (handleReady, whose
// comments carry the same numbers):
//
//  1. send every message except those that vouch for this Ready's writes
//     (acknowledgements of appended entries, votes): a leader's appends
//     reach the followers while it fsyncs its own copy;
//  2. apply the committed entries an earlier Ready already persisted,
//     waking their proposers and any linearizable reads now applied;
//  3. persist: a snapshot, then entries and HardState to the raft log in one
//     batch, fsynced unless only the commit index moved;
//  4. send the acknowledgements and votes, now that they are true after a
//     crash;
//  5. apply the rest of the committed entries (those this Ready persisted),
//     then compact the log behind the durably applied state;
//  6. advance.
//
// Any error on the persistence path stops the node (Err reports it): a node
// that cannot write its log must not keep acknowledging anything.
//
// New builds a replica and Start runs its loop: the transport is built in
// between, with the replica as its handler. The loop's clock is a ticker at
// Config.TickInterval, or Config.Ticks for a test that ticks by hand
// (interaction_test.go).
//
// Callers (the kv service) use Propose and ReadBarrier from any goroutine.
package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/command"
)

// NodeID identifies a member of the raft group. It is never an address.
type NodeID uint64

// Errors a proposer or reader can see. ErrUnknownOutcome is the honest answer
// for a write whose fate the node cannot know: it may have been applied.
var (
	ErrStopped        = errors.New("node is stopping")
	ErrNoLeader       = errors.New("no leader: the cluster has no quorum")
	ErrBusy           = errors.New("too many requests in flight")
	ErrTimeout        = errors.New("request timed out")
	ErrUnknownOutcome = errors.New("outcome unknown: the write may have been applied")
	errReadRetry      = errors.New("read index request lost; retry")
)

// LogStore is the durable raft log the replica persists to (raftlog.Log).
type LogStore interface {
	raft.Storage
	// Save persists hs (if not empty) and ents in one fsynced batch.
	Save(hs *pb.HardState, ents []*pb.Entry) error
	// Compact discards entries up to index; cs is the configuration as of index.
	Compact(index uint64, cs *pb.ConfState) error
	// Bootstrap stores the first configuration of a brand-new group.
	Bootstrap(cs *pb.ConfState) error
	IsEmpty() bool
}

// Entry is a committed entry as the state machine sees it (Data nil for raft's
// own entries, which only advance the applied index).
type Entry struct {
	Index uint64
	Data  []byte
	// Conf is set for a configuration change (Data is then nil).
	Conf *ConfChange
}

// StateMachine is what the replica applies to (fsm.FSM, through the node's
// adapter, which turns a ConfChange into the member table's change).
type StateMachine interface {
	// Apply applies ents in order, skipping those at or below AppliedIndex,
	// and returns their results: each is delivered to the waiting request
	// its ReqID names (none for 0, or for a request proposed on another
	// node). The results are typed in the log's own vocabulary (package
	// command), so they reach Pending.Wait as they left apply, with no
	// boxing or assertion on the way.
	Apply(ents []Entry) ([]command.Result, error)
	AppliedIndex() uint64
	// Sync returns the highest applied index the state holds durably (the
	// log is never compacted past it); it may start making more durable
	// in the background, for a later call to report.
	Sync() (uint64, error)
	// InstallSnapshot replaces the whole state with the one a snapshot
	// brought; ref is the snapshot's Data (the transport's reference to the
	// received files). A received state applied below index is refused
	// before the current state is touched. Afterwards AppliedIndex is the
	// installed state's.
	InstallSnapshot(ref []byte, index uint64) error
}

// Transport delivers raft messages to peers. Send must not block on the
// network: it queues, and drops (reporting the peer unreachable) when full.
type Transport interface {
	Send(msgs []*pb.Message)
}

// Links is what a transport may also know: whether its connection to a
// peer is up. A peer that dies or is cut off loses it at the first write
// that fails, within a heartbeat, where raft's own activity flags keep it
// active for up to an election timeout (and answers it sent just before
// it died can set them again). A Transport that implements Links makes
// the leader count a member as heard from only while connected to it.
type Links interface {
	Connected(id uint64) bool
}

// Config configures a replica. Durations and counts are documented with
// their defaults in config.Raft; Default fills the zero fields.
type Config struct {
	ID NodeID
	// Peers are the initial voters; used only when the log is empty.
	Peers []NodeID
	// TickInterval is one raft tick (heartbeat granularity).
	TickInterval time.Duration
	// Ticks, when not nil, is raft's clock in place of a ticker at
	// TickInterval: every value received is one tick. A test drives
	// elections and heartbeats by hand with it, so that which member
	// campaigns, and when, depends on the test alone. TickInterval still
	// sizes what is timed by the wall clock (ReadRetry, the read lease,
	// the promotion check).
	Ticks <-chan time.Time
	// ElectionTicks and HeartbeatTicks are in ticks.
	ElectionTicks, HeartbeatTicks int
	// LeaseReads lets the leader serve ReadBarrier from a read lease earned
	// by quorum-acknowledged heartbeat rounds (lease.go) instead of a round
	// per batch of reads.
	LeaseReads bool
	// CompactEvery is how many applied entries pass between log compactions;
	// CompactKeep entries behind the applied index are kept for slow followers.
	CompactEvery, CompactKeep uint64
	// CompactEveryBytes and CompactKeepBytes bound the same two spans by the
	// bytes of entry data, whichever limit comes first (logspan.go): the
	// defaults, 16 MiB each, keep the log's live span within a quarter and a
	// half of the raft log's 64 MiB memtable.
	CompactEveryBytes, CompactKeepBytes uint64
	// MaxPending bounds proposals waiting for their entry (ErrBusy beyond).
	MaxPending int
	// MaxUncommittedBytes bounds the leader's uncommitted log tail.
	MaxUncommittedBytes uint64
	// ReadRetry is how long a ReadIndex round may go unanswered before its
	// readers retry in a new one (readBatcher.roundInFlight); the default is
	// half an election timeout.
	ReadRetry time.Duration
	// Witness makes this member a witness: it votes and acknowledges like
	// any voter but never asks for votes, and ignores a leadership
	// transfer's order to campaign, so it is never leader (docs/witness.md).
	Witness bool
	// Stamp, when set, is given the data of every normal entry this node
	// appends as leader, proposed here or forwarded by a follower, before
	// raft takes it, to write in place the leader's time (clusterclock):
	// so only the leader's clock stamps the log.
	Stamp func(data []byte)
	// IsWitness, when set, says which members are witnesses: a leader never
	// hands leadership to one, and a member never grants one its vote.
	IsWitness func(NodeID) bool
}

// WithDefaults returns c with zero fields set to kvd's defaults.
func (c Config) WithDefaults() Config {
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = 1
	}
	if c.CompactEvery == 0 {
		c.CompactEvery = 10000
	}
	if c.CompactKeep == 0 {
		c.CompactKeep = 5000
	}
	if c.CompactEveryBytes == 0 {
		c.CompactEveryBytes = 16 << 20
	}
	if c.CompactKeepBytes == 0 {
		c.CompactKeepBytes = 16 << 20
	}
	if c.MaxPending == 0 {
		c.MaxPending = 16384
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = 256 << 20
	}
	if c.ReadRetry == 0 {
		c.ReadRetry = time.Duration(c.ElectionTicks) * c.TickInterval / 2
	}
	return c
}

// Status is a snapshot of the node's raft state for health checks and metrics.
type Status struct {
	ID       NodeID
	Leader   NodeID
	Term     uint64
	Role     string // leader, follower, candidate, pre-candidate
	Commit   uint64
	Applied  uint64
	Voters   []NodeID
	Learners []NodeID
	// Ready: the log is replayed, a leader is known, and this node has applied
	// what was committed when it started (DESIGN decision 7).
	Ready bool
	// LeaderChanges counts leader changes this node has seen.
	LeaderChanges uint64
	// Pending is the number of proposals waiting for their entry.
	Pending int
	// Removed: this member was removed from the cluster and serves nothing.
	Removed bool
	// RemovedAt is the index of the last removal of this member it applied
	// since it started (0: none), kept when a later entry adds it back: a
	// data dir that replays its own removal belongs to the member removed,
	// whatever followed (membership's leftCluster).
	RemovedAt uint64
	// ProposalsApplied and ProposalsFailed count this node's proposals by
	// outcome since it started.
	ProposalsApplied, ProposalsFailed uint64
	// LeaseReads counts read batches the leader answered from its lease;
	// LeaseFallbacks, those in lease mode that needed a ReadIndex round.
	LeaseReads, LeaseFallbacks uint64
	// ReadRounds counts the ReadIndex rounds this node started for
	// linearizable reads, and ReadRoundReads the reads they carried (a read
	// retried after a lost round counts again): their ratio is how many
	// reads one round carries.
	ReadRounds, ReadRoundReads uint64
	// SyncedEntries counts entries written in fsynced log batches, and
	// SyncedBatches those batches: their ratio is what group commit
	// achieves. GatherHolds counts the batches a leader held open for the
	// writers it had just answered (gather).
	SyncedEntries, SyncedBatches, GatherHolds uint64
}

// report is a transport's word about a peer, handed to raft in the loop.
type report struct {
	id       uint64
	snapshot bool // a snapshot send finished (failed says how)
	failed   bool
}

type proposal struct {
	reqID uint64
	data  []byte
}

// Replica runs one raft member.
type Replica struct {
	cfg    Config
	logger *slog.Logger
	log    LogStore
	sm     StateMachine
	tr     Transport
	rn     *raft.RawNode

	// witnesses are the members that are witnesses (refreshLease), and
	// wgate the appends a leader holds back from them (witnessgate.go).
	witnesses map[uint64]bool
	wgate     witnessGate

	propc   chan proposal
	recvc   chan *pb.Message
	reportc chan report
	readc   chan struct{} // wake-up: readers joined the open batch
	adminc  chan func()   // membership and leadership operations, run on the loop
	stopc   chan struct{}
	done    chan struct{}

	waits *waitRegistry
	reads *readBatcher
	lease readLease // owned by the Ready loop

	status atomic.Pointer[Status]
	errMu  sync.Mutex
	err    error

	// Ready-loop state.
	confState      *pb.ConfState
	lastConfChange uint64
	lastCompact    uint64
	span           logSpan // entry bytes applied since lastCompact
	startCommit    uint64
	readyCommit    uint64 // the leader's commit index, learned by readyProbe; 0 until known
	readyProbeTick uint64 // tick of the last probe; 0: none in flight
	readyProbe     string // the probe's ReadIndex context (readyProbePrefix)
	term           uint64 // as of the last Ready's HardState
	ready          bool
	leader         uint64
	leaderChanges  uint64
	stopOnce       sync.Once
	startOnce      sync.Once // the loop runs, or Stop saw it never would
	// Proposals made on this node that were applied, and that failed (refused,
	// dropped, timed out or of unknown outcome).
	proposalsApplied, proposalsFailed atomic.Uint64
	soloLeader                        atomic.Bool
	progress                          atomic.Pointer[map[NodeID]Progress]
	ticks                             uint64
	promoteAfter                      map[uint64]uint64 // learner ID → tick before which no new promotion is proposed
	heardAt                           map[uint64]uint64 // peer ID → last tick the leader saw it RecentActive
	leaderTick                        uint64            // tick at which heardAt was started: this leadership's first
	links                             Links             // nil when the transport does not know its connections
	removed                           bool              // this member was removed from the configuration
	removedAt                         uint64            // Status.RemovedAt
	// Group commit (gather): the fsync time's moving average, the writers
	// expected in the next batch, the hold's timer, and counts for Status.
	syncTime                                  time.Duration
	writers                                   int
	gatherSkip, gatherBackoff                 int // holds to skip, and the skip after the next fruitless one
	gatherTimer                               *time.Timer
	syncedEntries, syncedBatches, gatherHolds uint64
	readRounds, readRoundReads                uint64
	// Proposals taken in but not yet stepped into raft (batch), and their
	// bytes: flushProposals steps them as one MsgProp.
	batch      []proposal
	batchBytes int
	// The request ID of the configuration change proposed since the last
	// Ready, 0 when none (checkConfProposed).
	confProposed uint64
}

// New opens the raft member over log and sm; Start runs it. A brand-new log
// is bootstrapped with cfg.Peers as voters. The two steps are apart because
// the transport and the replica each need the other: the replica is the
// transport's handler, the transport the replica's sender. Messages Step
// delivers before Start wait in the replica's queue.
func New(cfg Config, log LogStore, sm StateMachine, logger *slog.Logger) (*Replica, error) {
	cfg = cfg.WithDefaults()
	if cfg.ID == 0 {
		return nil, errors.New("new replica: node ID must not be 0")
	}
	if log.IsEmpty() {
		if len(cfg.Peers) == 0 {
			return nil, errors.New("new replica: empty log and no initial peers to bootstrap")
		}
		cs := &pb.ConfState{}
		for _, p := range cfg.Peers {
			cs.Voters = append(cs.Voters, uint64(p))
		}
		if err := log.Bootstrap(cs); err != nil {
			return nil, fmt.Errorf("bootstrap raft log: %w", err)
		}
		logger.Info("bootstrapped new raft group", "voters", cs.Voters)
	}
	hs, cs, err := log.InitialState()
	if err != nil {
		return nil, fmt.Errorf("read raft state: %w", err)
	}
	snap, err := log.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("read raft compaction point: %w", err)
	}
	// Raft redelivers every committed entry after the compaction point: the
	// state machine skips what it already holds, and configuration changes in
	// that range are re-applied to raft, whose ConfState starts at that point.
	compacted := snap.GetMetadata().GetIndex()
	if sm.AppliedIndex() < compacted {
		return nil, fmt.Errorf("new replica: state applied to %d but raft log compacted to %d: state store is behind its log", sm.AppliedIndex(), compacted)
	}
	if _, ok := log.(snapshotLog); !ok {
		return nil, errors.New("new replica: the raft log cannot apply snapshots")
	}
	sm = newTrackedSM(sm, compacted)
	storage := &snapshotStorage{LogStore: log}
	rcfg := &raft.Config{
		ID:                        uint64(cfg.ID),
		ElectionTick:              cfg.voteLeaseTicks(),
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   storage,
		Applied:                   compacted,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  64 << 20,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedBytes,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		Logger:                    newRaftLogger(logger),
		StepDownOnRemoval:         true,
	}
	rn, err := raft.NewRawNode(rcfg)
	if err != nil {
		return nil, fmt.Errorf("new raft node: %w", err)
	}
	r := &Replica{
		cfg: cfg, logger: logger, log: log, sm: sm, rn: rn,
		propc:       make(chan proposal, 4096),
		recvc:       make(chan *pb.Message, 4096),
		reportc:     make(chan report, 1024),
		readc:       make(chan struct{}, 1),
		adminc:      make(chan func()),
		stopc:       make(chan struct{}),
		done:        make(chan struct{}),
		waits:       newWaitRegistry(),
		reads:       newReadBatcher(),
		lease:       readLease{dur: leaseDuration(cfg, false)},
		confState:   proto.Clone(cs).(*pb.ConfState),
		lastCompact: compacted,
		startCommit: hs.GetCommit(),
		term:        hs.GetTerm(),
		readyProbe:  readyProbePrefix + strconv.FormatUint(rand.Uint64(), 16),
	}
	storage.point = func() (uint64, *pb.ConfState) {
		return r.sm.AppliedIndex(), proto.Clone(r.confState).(*pb.ConfState)
	}
	r.publishStatus()
	return r, nil
}

// Start runs the Ready loop, sending through tr, until Stop. It is called
// once; a replica stopped before it never runs.
func (r *Replica) Start(tr Transport) error {
	err := errors.New("start replica: already started or stopped")
	r.startOnce.Do(func() {
		r.tr, r.links = tr, linksOf(tr)
		// A group of one need not wait an election timeout to lead itself.
		if cs := r.confState; len(cs.GetVoters()) == 1 && cs.GetVoters()[0] == uint64(r.cfg.ID) {
			if err = r.rn.Campaign(); err != nil {
				err = fmt.Errorf("start replica: campaign: %w", err)
				r.finish()
				return
			}
		}
		err = nil
		go r.run()
	})
	return err
}

// Propose submits data (an encoded command carrying reqID) and returns once
// it is queued for raft; Wait on the result returns its applied result. The
// order of Propose calls from one goroutine is the order in the log. It
// gives up waiting for room in the proposal queue when ctx ends or at
// deadline (the zero time: only ctx). The deadline is kept apart from ctx
// because a context with a deadline costs a timer and a registration with
// its parent on every write, and the queue almost always has room: a timer
// is made only when it has not.
func (r *Replica) Propose(ctx context.Context, deadline time.Time, reqID uint64, data []byte) (*Pending, error) {
	if r.waits.size() >= r.cfg.MaxPending {
		r.proposalsFailed.Add(1)
		return nil, ErrBusy
	}
	ch, ok := r.waits.register(reqID)
	if !ok {
		return nil, fmt.Errorf("propose: duplicate request ID %x", reqID)
	}
	p := &Pending{r: r, reqID: reqID, ch: ch}
	refuse := func(err error) (*Pending, error) {
		p.release()
		r.proposalsFailed.Add(1)
		return nil, err
	}
	select {
	case <-r.done:
		// Checked first: a stopped replica's queue has room but no reader.
		return refuse(ErrStopped)
	default:
	}
	prop := proposal{reqID: reqID, data: data}
	select {
	case r.propc <- prop:
		return p, nil
	default:
	}
	expired, stop := after(deadline)
	defer stop()
	select {
	case r.propc <- prop:
		return p, nil
	case <-ctx.Done():
	case <-expired:
	case <-r.done:
		return refuse(ErrStopped)
	}
	return refuse(ErrTimeout)
}

// after returns a channel that receives at deadline, or nil (never) for the
// zero time, and the function that releases its timer.
func after(deadline time.Time) (<-chan time.Time, func() bool) {
	if deadline.IsZero() {
		return nil, func() bool { return false }
	}
	t := time.NewTimer(time.Until(deadline))
	return t.C, t.Stop
}

// Pending is a proposal in flight.
type Pending struct {
	r     *Replica
	reqID uint64
	ch    chan Outcome
	once  sync.Once
}

func (p *Pending) release() {
	p.once.Do(func() { p.r.waits.cancel(p.reqID) })
}

// Wait returns the applied result. If ctx ends first, or deadline passes
// (the zero time: only ctx), the error is ErrUnknownOutcome: the entry may
// still commit. As in Propose, the deadline is not a context, so that a
// write costs no context, and no timer when its outcome is already in.
func (p *Pending) Wait(ctx context.Context, deadline time.Time) (command.Result, error) {
	defer p.release()
	select {
	case o := <-p.ch:
		return p.outcome(o)
	default:
	}
	expired, stop := after(deadline)
	defer stop()
	select {
	case o := <-p.ch:
		return p.outcome(o)
	case <-p.r.done:
		// The loop answers every waiter it knows of before done closes.
		// A proposal that registered after that (it found done still open
		// and room in the queue nobody reads any more) was never proposed:
		// nobody else will answer it.
		select {
		case o := <-p.ch:
			return p.outcome(o)
		default:
		}
		p.r.proposalsFailed.Add(1)
		return command.Result{}, ErrStopped
	case <-ctx.Done():
	case <-expired:
	}
	p.r.proposalsFailed.Add(1)
	return command.Result{}, ErrUnknownOutcome
}

func (p *Pending) outcome(o Outcome) (command.Result, error) {
	if o.Err != nil {
		p.r.proposalsFailed.Add(1)
	} else {
		p.r.proposalsApplied.Add(1)
	}
	return o.Result, o.Err
}

// ReadBarrier returns once this node has applied everything committed before
// the call, as confirmed by the current leader (ReadIndex): a read of the
// state machine after it is linearizable.
func (r *Replica) ReadBarrier(ctx context.Context) error {
	// The sole voter of a group, leading and caught up with what was committed
	// when it started, has applied every acknowledged write (a write is
	// acknowledged only once applied) and no other node can commit: its local
	// state is already linearizable. Adding a member ends this (the conf
	// change is applied before any new member could lead).
	if r.soloLeader.Load() {
		return nil
	}
	for {
		ch := r.reads.join()
		select {
		case r.readc <- struct{}{}:
		default: // a wake-up is already pending
		}
		select {
		case err := <-ch:
			if errors.Is(err, errReadRetry) {
				continue
			}
			return err
		case <-ctx.Done():
			if r.Status().Leader == 0 {
				return ErrNoLeader
			}
			return ErrTimeout
		case <-r.done:
			return ErrStopped
		}
	}
}

// ReadsAreLocal reports whether ReadBarrier would return at once: this node
// is the group's sole voter, leading and caught up.
func (r *Replica) ReadsAreLocal() bool { return r.soloLeader.Load() }

// Step delivers a message from a peer.
func (r *Replica) Step(ctx context.Context, m *pb.Message) error {
	select {
	case r.recvc <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrStopped
	}
}

// ReportUnreachable tells raft a peer could not be reached, so the leader
// stops pipelining to it until it answers again. Never blocks.
func (r *Replica) ReportUnreachable(id uint64) {
	select {
	case r.reportc <- report{id: id}:
	default:
	}
}

// ReportSnapshot tells raft how sending a snapshot to id ended. Unlike
// unreachable reports it is never dropped (raft would wait on that snapshot
// forever); it blocks until the loop takes it or the node stops.
func (r *Replica) ReportSnapshot(id uint64, failed bool) {
	select {
	case r.reportc <- report{id: id, snapshot: true, failed: failed}:
	case <-r.done:
	}
}

// Status returns the status the Ready loop last published, with the
// proposal counters and the pending count read live.
func (r *Replica) Status() Status {
	s := *r.status.Load()
	// Counted by the proposers, and by the loop after it published the
	// rest: read them now, so a reader that saw its proposal finish sees it
	// counted and no longer pending.
	s.ProposalsApplied, s.ProposalsFailed = r.proposalsApplied.Load(), r.proposalsFailed.Load()
	s.Pending = r.waits.size()
	return s
}

// Done is closed when the Ready loop has exited; Err says why.
func (r *Replica) Done() <-chan struct{} { return r.done }

// Err is the fatal error that stopped the node, or nil after a clean Stop.
func (r *Replica) Err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

// Stop ends the Ready loop and fails every waiter: with ErrStopped those
// whose proposal raft never took, and with ErrUnknownOutcome those it took,
// which the other members may still commit.
func (r *Replica) Stop() {
	r.stopOnce.Do(func() { close(r.stopc) })
	// Never started: there is no loop to wait for, and none will run.
	r.startOnce.Do(r.finish)
	<-r.done
}

// finish fails every waiter and reports the loop gone: the last thing the
// Ready loop does, and all a replica that never ran has to do.
func (r *Replica) finish() {
	r.waits.stop(ErrStopped, ErrUnknownOutcome)
	r.reads.failAll(ErrStopped)
	close(r.done)
}

func (r *Replica) fail(err error) {
	r.errMu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.errMu.Unlock()
	r.logger.Error("replica stopped by a fatal error", "err", err)
}

func (r *Replica) run() {
	defer r.finish()
	r.refreshLease()
	ticks := r.cfg.Ticks
	if ticks == nil {
		ticker := time.NewTicker(r.cfg.TickInterval)
		defer ticker.Stop()
		ticks = ticker.C
	}
	for {
		select {
		case <-ticks:
			r.rn.Tick()
			r.onTick()
		case f := <-r.adminc:
			f()
		case p := <-r.propc:
			r.propose(p)
			r.gather(1 + r.drain())
		case m := <-r.recvc:
			r.step(m)
			r.drain()
		case rep := <-r.reportc:
			if rep.snapshot {
				status := raft.SnapshotFinish
				if rep.failed {
					status = raft.SnapshotFailure
				}
				r.rn.ReportSnapshot(rep.id, status)
			} else {
				r.rn.ReportUnreachable(rep.id)
			}
		case <-r.readc:
		case <-r.stopc:
			return
		}
		// A Ready may answer the read round in flight, and then the readers
		// who joined meanwhile start the next one at once, once every Ready
		// in hand is handled: starting it between two Readies (a simpler
		// loop, tried) cost 64-connection gets on three nodes about 14 % in
		// alternating runs.
		for {
			r.flushProposals()
			r.startReads()
			if !r.rn.HasReady() {
				break
			}
			for r.rn.HasReady() {
				if err := r.handleReady(r.rn.Ready()); err != nil {
					r.fail(err)
					return
				}
			}
		}
		r.releaseWitnessApps()
		r.publishStatus()
	}
}

// drain takes in what else is queued, proposals and peers' messages alike,
// so that one Ready, and one fsync, covers all of it: group commit. A leader
// that stepped each follower's acknowledgement or forwarded proposal alone
// would pay an fsync and an apply round for every message.
// It returns how many proposals it took.
func (r *Replica) drain() int {
	props := 0
	for n := 0; n < 1024; n++ {
		select {
		case p := <-r.propc:
			r.propose(p)
			props++
		case m := <-r.recvc:
			r.step(m)
		default:
			return props
		}
	}
	return props
}

// gather holds a leader's batch of n proposals open, briefly, for the
// writers it has just answered: group commit's other half. Without it the
// writers of a busy node split into two alternating groups, the one whose
// entries are being fsynced and the one that was answered meanwhile, so
// each fsync covers about half of them. A writer answered after an apply
// sends its next write tens of microseconds later on idle cores, and a
// few hundred later on busy ones (the other writers' replies go first),
// so waiting for it lets one fsync cover both groups.
//
// The hold is bounded by the recent fsync time F. Writers that write
// again T after they are answered take, without the hold, 2F a round when
// T < F (each group waits for the other's fsync, then its own), and T + F
// with it, so a hold pays up to F; past F the groups drift apart and take
// T + F either way, and a hold would save only the fsync's CPU. Half of F
// is the break-even only for writers answered once and not again, and the
// backoff below protects those (bench/RESULTS-core.md has the measured
// batches). The hold is taken only when the last apply answered writers
// that have not come back yet: a lone writer never waits. It ends at once
// when a peer's message or a reader arrives, so it never delays a commit
// or a read. This is PostgreSQL's commit_delay with commit_siblings, with
// the delay and the sibling count measured rather than configured.
//
// An answered writer need not write again soon (a client that mostly
// reads, say), and then holding for it only delays the writes in hand. A
// hold that runs out before every writer it waited for is back makes the
// next holds be skipped, twice as many after each such hold, up to
// maxGatherSkip; a hold that gathers them all ends the backoff.
func (r *Replica) gather(n int) {
	want := r.writers
	r.writers = 0
	if n >= want || r.leader != uint64(r.cfg.ID) {
		return
	}
	hold := r.syncTime
	if hold <= 0 {
		return
	}
	if r.gatherSkip > 0 {
		r.gatherSkip--
		return
	}
	hold = min(hold, maxGather)
	if r.gatherTimer == nil {
		r.gatherTimer = time.NewTimer(hold)
	} else {
		r.gatherTimer.Reset(hold)
	}
	defer r.gatherTimer.Stop()
	r.gatherHolds++
	for n < want {
		select {
		case p := <-r.propc:
			r.propose(p)
			n += 1 + r.drain()
		case m := <-r.recvc:
			r.step(m)
			return
		case <-r.readc:
			return
		case <-r.gatherTimer.C:
			r.gatherBackoff = min(2*r.gatherBackoff+1, maxGatherSkip)
			r.gatherSkip = r.gatherBackoff
			return
		}
	}
	r.gatherBackoff = 0
}

// startReads sends the open batch of readers on its way unless a round
// is in flight (readBatcher.roundInFlight).
func (r *Replica) startReads() {
	if r.reads.roundInFlight(time.Now(), r.cfg.ReadRetry) {
		return
	}
	if readers := r.reads.take(); len(readers) > 0 {
		r.readIndex(readers)
	}
}

// readIndex finds the index a batch of readers must wait for: the commit
// index, when the leader's lease covers it, or else raft's answer to a
// ReadIndex round (which renews the lease).
func (r *Replica) readIndex(readers []chan error) {
	now := time.Now()
	st := r.rn.BasicStatus()
	if index, ok := r.lease.valid(now, st); ok {
		r.reads.serveAt(index, readers)
		r.reads.applied(r.sm.AppliedIndex())
		return
	}
	r.readRounds++
	r.readRoundReads += uint64(len(readers))
	r.rn.ReadIndex(r.reads.request(readers, now, st.GetTerm()))
}

// renewLease starts a ReadIndex round with no readers, so a lease in use is
// extended before it runs out rather than after.
func (r *Replica) renewLease() {
	now := time.Now()
	st := r.rn.BasicStatus()
	if !r.lease.wantsRenewal(now, st) {
		return
	}
	r.lease.renewAt = now
	r.rn.ReadIndex(r.reads.request(nil, now, st.GetTerm()))
}

// propose takes p into the batch that flushProposals steps into raft.
func (r *Replica) propose(p proposal) {
	if len(r.batch) > 0 && (len(r.batch) >= maxBatchEntries || r.batchBytes+len(p.data) > maxBatchBytes) {
		r.flushProposals()
	}
	r.batch = append(r.batch, p)
	r.batchBytes += len(p.data)
}

// flushProposals steps the batched proposals into raft as one MsgProp.
// Raft answers every MsgProp it appends with an append message to each
// follower, and a follower forwards each MsgProp it gets to the leader as
// one message: a proposal stepped alone cost a message to every follower
// and an acknowledgement back, each marshalled, sent, stepped and (for the
// acknowledgement) counted toward the commit, where a batch costs one.
// Raft takes or refuses a MsgProp whole, so a refusal fails the batch.
func (r *Replica) flushProposals() {
	if len(r.batch) == 0 {
		return
	}
	ents := make([]*pb.Entry, len(r.batch))
	for i, p := range r.batch {
		ents[i] = &pb.Entry{Data: p.data}
	}
	r.stampAsLeader(ents)
	err := r.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(uint64(r.cfg.ID)), Entries: ents})
	if err != nil {
		if errors.Is(err, raft.ErrProposalDropped) {
			// Raft's own view: r.leader is as of the last Ready, and a
			// message stepped since (a vote, a MsgTimeoutNow) may have
			// made this node a candidate, which has no leader.
			if r.rn.BasicStatus().Lead == 0 {
				err = ErrNoLeader
			} else {
				err = ErrBusy
			}
		}
		for _, p := range r.batch {
			r.waits.trigger(p.reqID, Outcome{Err: err})
		}
	} else {
		r.waits.markProposed(r.batch)
	}
	clear(r.batch)
	r.batch = r.batch[:0]
	r.batchBytes = 0
}

func (r *Replica) step(m *pb.Message) {
	if r.refusesVote(m) || r.refusesWitness(m) {
		return
	}
	if m.GetType() == pb.MsgProp {
		r.stampAsLeader(m.Entries) // a follower's forwarded proposal
	}
	if err := r.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
		r.logger.Debug("step message", "from", m.GetFrom(), "type", m.GetType().String(), "err", err)
	}
}

// stampAsLeader gives Config.Stamp the normal entries of a proposal this
// node is about to append as leader. A follower's proposals go to the
// leader unstamped by it; a proposal raft drops is stamped for nothing.
func (r *Replica) stampAsLeader(ents []*pb.Entry) {
	if r.cfg.Stamp == nil || r.rn.BasicStatus().RaftState != raft.StateLeader {
		return
	}
	for _, e := range ents {
		if e.GetType() == pb.EntryNormal {
			r.cfg.Stamp(e.Data)
		}
	}
}

// refusesVote reports whether m is a request for this member's vote at a
// higher term that it must ignore because it has just started. A leader's
// read lease (lease.go) rests on the followers that acknowledged it refusing
// votes for an election timeout after hearing from it; raft's refusal is
// held in memory only, so a follower that acknowledged and then restarted
// within the lease would vote at once (it knows no leader yet), and another
// member could be elected while the old leader still reads from its lease.
// So in lease mode a member ignores (pre-)votes for its first ElectionTicks
// ticks, as if it had heard from a leader as it started; a leadership
// transfer's votes pass, as they pass raft's own refusal.
func (r *Replica) refusesVote(m *pb.Message) bool {
	// A witness refuses whatever its own read consistency: the data
	// members' is what its refusal protects.
	if (r.lease.dur == 0 && !r.cfg.Witness) || r.ticks >= uint64(r.cfg.voteLeaseTicks()) {
		return false
	}
	if t := m.GetType(); t != pb.MsgVote && t != pb.MsgPreVote {
		return false
	}
	return m.GetTerm() > r.rn.BasicStatus().GetTerm() && string(m.GetContext()) != campaignTransfer
}

// campaignTransfer is the context raft puts on the votes of a leadership
// transfer's election (raft's unexported constant of that name).
const campaignTransfer = "CampaignTransfer"

func (r *Replica) handleReady(rd raft.Ready) error {
	if r.cfg.Witness && rd.SoftState != nil && rd.SoftState.RaftState == raft.StateLeader {
		// The rules of witness.go make this impossible; should a member
		// configuration defeat them, stop before sending a log without
		// payloads to anyone.
		return errors.New("this witness became leader, which a witness must never be: stopping (are the data members' --initial-witnesses the same as this one's?)")
	}
	r.checkConfProposed(rd)
	if rd.SoftState != nil && rd.SoftState.Lead != r.leader {
		r.logger.Info("leader changed", "from", r.leader, "to", rd.SoftState.Lead, "term", r.rn.BasicStatus().GetTerm())
		lost := r.leader != 0
		r.leader = rd.SoftState.Lead
		r.leaderChanges++
		// A read index requested from the old leader may never be answered.
		r.reads.failInflight(errReadRetry)
		if lost {
			// Proposals in flight may have died with the old leader, or may
			// still commit under the new one: say so now rather than make
			// clients wait out their timeout.
			r.waits.failAll(ErrUnknownOutcome)
		}
	}
	if t := rd.HardState.GetTerm(); t > r.term {
		// The same leader re-elected (this member did not vote, say): it
		// answers no request of an earlier term, so the rounds in flight
		// would wait out ReadRetry. A leader change fails them above.
		r.term = t
		r.reads.failInflight(errReadRetry)
	}
	// Read indexes first: releasing a reader depends only on the applied
	// index, never on this Ready's writes, so it need not wait for the fsync.
	for _, rs := range rd.ReadStates {
		if bytes.HasPrefix(rs.RequestCtx, []byte(readyProbePrefix)) {
			if string(rs.RequestCtx) == r.readyProbe {
				r.readyCommit = max(rs.Index, r.startCommit, 1)
			}
			continue
		}
		if req, ok := r.reads.indexKnown(rs.RequestCtx, rs.Index); ok {
			r.lease.acknowledged(req, r.rn.BasicStatus())
		}
	}
	r.reads.applied(r.sm.AppliedIndex())
	// 1. Send. Only the messages that vouch for this Ready's state wait
	// for its fsync: acknowledgements of appended entries and votes (raft's own rule
	// when it runs with asynchronous storage writes, and the thesis' 3.8).
	// Everything else goes now. A leader's appends reach the followers while
	// it fsyncs its own copy (thesis 10.2.1, as etcd does), so the two fsyncs
	// of a commit overlap instead of adding up; the leader counts itself
	// toward a quorum only when raft steps its self-acknowledgement, in
	// Advance, after the fsync. A follower's forwarded proposals and read
	// requests, and its heartbeat answers (which confirm a read index),
	// promise nothing a crash could make it forget, so a write or a read
	// sent to a follower does not wait for the follower's fsync of earlier
	// entries.
	now, later := beforeDisk(rd.Messages)
	if err := r.send(now); err != nil {
		return err
	}
	// Send woke the peer writers, which wait on this thread's run queue;
	// the fsync below blocks the thread in a system call, and until the
	// runtime hands the queue to another thread the appends wait for the
	// very fsync they were sent early to overlap. A scheduler trace of
	// 1-connection sets on three nodes found the leader's peer writers
	// waiting about 150 µs per wake-up. Yielding first lets them write.
	// Only under a light load (a Ready of one or two entries, no proposal
	// queued): a busy loop would queue behind every goroutine it woke, and
	// an unconditional yield cost 64-connection sets 8 %
	// (bench/RESULTS-cluster.md).
	if len(now) > 0 && len(rd.Entries) > 0 && len(rd.Entries) <= 2 && len(r.propc) == 0 {
		runtime.Gosched()
	}
	// 2. Apply early. Committed entries this node already holds on disk
	// are applied, and
	// their writers answered, before this Ready's fsync rather than after
	// it: a leader's Ready typically carries the entries its followers have
	// just acknowledged together with the next batch, and a follower's the
	// commit index of entries it persisted with new ones, so applying after
	// the fsync made every write wait for the fsync of the batch behind it.
	early, late := persistedFirst(rd)
	if len(early) > 0 {
		if err := r.apply(early); err != nil {
			return err
		}
		r.reads.applied(r.sm.AppliedIndex())
	}
	// 3. Persist.
	if !raft.IsEmptySnap(rd.Snapshot) {
		// Before the entries that follow it, and before the acknowledgement
		// sent in step 4, from which alone the leader learns we hold it.
		if err := r.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) || len(rd.Entries) > 0 {
		start := time.Now()
		ents := rd.Entries
		if r.cfg.Witness {
			ents = witnessEntries(ents)
		}
		if err := r.log.Save(rd.HardState, ents); err != nil {
			return fmt.Errorf("persist raft log: %w", err)
		}
		if rd.MustSync && len(rd.Entries) > 0 {
			// A moving average over the last eight or so fsyncs.
			r.syncTime += (time.Since(start) - r.syncTime) / 8
			r.syncedBatches++
			r.syncedEntries += uint64(len(rd.Entries))
		}
	}
	// 4. Send the acknowledgements and votes, now that what they vouch for
	// is durable.
	if err := r.send(later); err != nil {
		return err
	}
	// 5. Apply what could not be applied before the fsync; compact below.
	if len(late) > 0 {
		if err := r.apply(late); err != nil {
			return err
		}
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		// The proposals raft took whose entries the snapshot covers will
		// never be applied here, so their results are nowhere: their
		// entries are at or below its index, or below the received state's
		// applied index, which the state machine skips as raft redelivers
		// them. This member cannot tell which proposals those are (a
		// follower never learns its forwarded proposals' indexes), so all
		// those still waiting after this Ready's entries were applied hear
		// that their outcome is unknown, as at a leader change, rather than
		// at their timeout. Those still queued are proposed after the
		// leader's checkpoint, past anything it holds, and are answered as
		// usual.
		r.waits.failProposed(ErrUnknownOutcome)
	}
	r.reads.applied(r.sm.AppliedIndex())
	// Compact only now: the entries applied early were committed by this
	// Ready's HardState, which the log refuses to compact past until it is
	// saved (a state machine that syncs at once made a batch committed in
	// one Ready stop the node).
	if len(rd.CommittedEntries) > 0 {
		if err := r.maybeCompact(); err != nil {
			return err
		}
	}
	// 6. Advance.
	r.rn.Advance(rd)
	return nil
}

// persistedFirst splits rd's committed entries into those already on this
// node's disk, which may be applied before rd is persisted, and the rest.
// Raft hands a Ready's committed entries over before its new entries are
// persisted (it lets a follower commit entries in the Ready that appends
// them), and applying one of those first would let a crash leave the state
// store ahead of the log that must replay it. Every entry below the first
// new one was persisted by an earlier Ready; committed entries are never
// overwritten. A snapshot replaces the state the entries apply to, so it
// goes first and everything after it.
func persistedFirst(rd raft.Ready) (early, late []*pb.Entry) {
	ents := rd.CommittedEntries
	if !raft.IsEmptySnap(rd.Snapshot) {
		return nil, ents
	}
	if len(rd.Entries) == 0 {
		return ents, nil
	}
	first := rd.Entries[0].GetIndex()
	n := 0
	for n < len(ents) && ents[n].GetIndex() < first {
		n++
	}
	return ents[:n], ents[n:]
}

// beforeDisk splits messages into those that may be sent before the Ready
// that produced them is persisted and those that must wait for it: answers
// that acknowledge appended entries or grant a vote. Most Readies hold none
// of those, and then msgs is returned as it is.
func beforeDisk(msgs []*pb.Message) (now, later []*pb.Message) {
	n := 0
	for _, m := range msgs {
		if waitsForDisk(m) {
			n++
		}
	}
	if n == 0 {
		return msgs, nil
	}
	now, later = make([]*pb.Message, 0, len(msgs)-n), make([]*pb.Message, 0, n)
	for _, m := range msgs {
		if waitsForDisk(m) {
			later = append(later, m)
		} else {
			now = append(now, m)
		}
	}
	return now, later
}

func waitsForDisk(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgAppResp, pb.MsgVoteResp, pb.MsgPreVoteResp:
		return true
	}
	return false
}

func (r *Replica) send(msgs []*pb.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if r.tr == nil {
		return fmt.Errorf("raft produced %d messages for peers but this node has no transport", len(msgs))
	}
	if r.cfg.Witness {
		msgs = withoutVoteRequests(msgs)
	}
	r.lease.sawMessages(msgs, r.rn.BasicStatus().GetTerm())
	r.releaseWitnessApps()
	r.tr.Send(r.gate(msgs))
	return nil
}

func (r *Replica) apply(committed []*pb.Entry) error {
	ents := make([]Entry, len(committed))
	bytes := 0
	// Configuration changes proposed on this node: their callers learn
	// the entry's index.
	type change struct{ reqID, index uint64 }
	var changes []change
	changed := false
	for i, e := range committed {
		ents[i] = Entry{Index: e.GetIndex()}
		bytes += len(e.GetData())
		switch e.GetType() {
		case pb.EntryNormal:
			ents[i].Data = e.GetData()
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			changed = true
			cc, reqID, err := r.applyConfChange(e)
			if err != nil {
				return err
			}
			ents[i].Conf = cc
			if reqID != 0 {
				changes = append(changes, change{reqID: reqID, index: e.GetIndex()})
			}
		}
	}
	results, err := r.sm.Apply(ents)
	if err != nil {
		return fmt.Errorf("apply committed entries: %w", err)
	}
	if changed {
		// After the state machine wrote the rows that say which members
		// are witnesses.
		r.refreshLease()
	}
	// A change's caller hears of it once the state machine holds its member
	// row too: a join's answer lists the members from there.
	for _, c := range changes {
		r.waits.trigger(c.reqID, Outcome{Index: c.index})
	}
	r.span.applied(committed[len(committed)-1].GetIndex(), bytes)
	// The writers gather waits for: those whose writes are queued already,
	// counted before the others are answered (an answered writer may be
	// quick enough to queue its next write before we count), and those
	// about to be answered.
	r.writers = len(r.propc)
	for _, a := range results {
		if a.ReqID != 0 && r.waits.trigger(a.ReqID, Outcome{Result: a}) {
			r.writers++
		}
	}
	return nil
}

// applyConfChange applies a committed configuration change to raft and
// returns it as the state machine sees it, with the request ID of the
// ChangeMember call that proposed it (0 when none on this node did).
func (r *Replica) applyConfChange(e *pb.Entry) (*ConfChange, uint64, error) {
	cci, err := confChangeFromEntry(e)
	if err != nil {
		return nil, 0, fmt.Errorf("decode conf change at %d: %w", e.GetIndex(), err)
	}
	r.confState = r.rn.ApplyConfChange(cci)
	r.lastConfChange = e.GetIndex()
	r.logger.Info("applied configuration change", "index", e.GetIndex(), "voters", r.confState.GetVoters(), "learners", r.confState.GetLearners())
	// kvd proposes only single-member v1 changes; anything else (none today)
	// changes raft's configuration but not the member table.
	c, ok := cci.(*pb.ConfChange)
	if !ok {
		return nil, 0, nil
	}
	out := &ConfChange{ID: NodeID(c.GetNodeId()), Context: c.GetContext()}
	switch c.GetType() {
	case pb.ConfChangeAddLearnerNode:
		out.Type = AddLearner
		r.readded(out.ID)
	case pb.ConfChangeAddNode:
		out.Type = PromoteVoter
		r.readded(out.ID)
	case pb.ConfChangeRemoveNode:
		out.Type = RemoveMember
		if out.ID == r.cfg.ID {
			r.removed, r.removedAt = true, e.GetIndex()
			r.logger.Warn("this member was removed from the cluster", "index", e.GetIndex())
		}
	default:
		return nil, 0, nil
	}
	return out, c.GetId(), nil
}

// readded clears the removal of this member when a later entry adds it
// back. A member rejoins under its old name, hence its old ID, and catches
// up by replaying the log, old removal included: that removal is history,
// not its fate (robustness fault replace-follower found the node stopping).
func (r *Replica) readded(id NodeID) {
	if id == r.cfg.ID && r.removed {
		r.removed = false
		r.logger.Info("this member was added back to the cluster")
	}
}

// maybeCompact truncates the raft log behind the durably applied state, so
// disk and memory stay bounded under a long write load.
func (r *Replica) maybeCompact() error {
	applied := r.sm.AppliedIndex()
	byCount := applied >= r.lastCompact+r.cfg.CompactEvery+r.cfg.CompactKeep
	byBytes := r.span.since() >= r.cfg.CompactEveryBytes+r.cfg.CompactKeepBytes
	if !byCount && !byBytes {
		return nil
	}
	durable, err := r.sm.Sync()
	if err != nil {
		return fmt.Errorf("sync state before log compaction: %w", err)
	}
	var idx uint64
	if durable > r.cfg.CompactKeep {
		idx = durable - r.cfg.CompactKeep
	}
	// Keep fewer entries when they are large (logspan.go).
	idx = max(idx, r.span.keepFrom(durable, r.cfg.CompactKeepBytes))
	if idx == 0 {
		return nil
	}
	// The ConfState we hold is as of the applied index; it is exact for idx
	// only if no configuration change happened after idx. Otherwise wait.
	if r.lastConfChange > idx || idx <= r.lastCompact {
		return nil
	}
	if err := r.log.Compact(idx, r.confState); err != nil {
		return fmt.Errorf("compact raft log to %d: %w", idx, err)
	}
	r.lastCompact = idx
	r.span.compacted(idx)
	r.logger.Debug("compacted raft log", "index", idx)
	return nil
}

func (r *Replica) publishStatus() {
	st := r.rn.BasicStatus() // Status() would copy every peer's progress: too dear per iteration
	s := &Status{
		ID:            NodeID(st.ID),
		Leader:        NodeID(st.Lead),
		Term:          st.GetTerm(),
		Role:          roleName(st.RaftState),
		Commit:        st.GetCommit(),
		Applied:       r.sm.AppliedIndex(),
		LeaderChanges: r.leaderChanges,
		// A removal replayed while catching up (applied behind commit) may
		// be followed by this member's re-addition: only a caught-up
		// member that is still removed has really left.
		Removed:        r.removed && r.sm.AppliedIndex() >= st.GetCommit(),
		RemovedAt:      r.removedAt,
		LeaseReads:     r.lease.served,
		LeaseFallbacks: r.lease.fallback,
		ReadRounds:     r.readRounds,
		ReadRoundReads: r.readRoundReads,
		SyncedEntries:  r.syncedEntries,
		SyncedBatches:  r.syncedBatches,
		GatherHolds:    r.gatherHolds,
	}
	for _, v := range r.confState.GetVoters() {
		s.Voters = append(s.Voters, NodeID(v))
	}
	for _, v := range r.confState.GetLearners() {
		s.Learners = append(s.Learners, NodeID(v))
	}
	if !r.ready && st.Lead != 0 {
		// Ready means caught up with the leader's commit index as it was
		// when we found the leader. A follower's own commit index trails
		// the leader's until its log catches up, so it cannot tell: ask the
		// leader (a ReadIndex round answers its commit index), again after
		// an election timeout if the answer was lost.
		if r.readyCommit == 0 && (r.readyProbeTick == 0 || r.ticks > r.readyProbeTick+uint64(r.cfg.ElectionTicks)) {
			r.readyProbeTick = max(r.ticks, 1)
			r.rn.ReadIndex([]byte(r.readyProbe))
		}
		r.ready = r.readyCommit != 0 && s.Applied >= r.readyCommit
	}
	s.Ready = r.ready && st.Lead != 0
	r.soloLeader.Store(s.Ready && s.Role == "leader" && len(s.Learners) == 0 &&
		len(s.Voters) == 1 && s.Voters[0] == r.cfg.ID)
	r.status.Store(s)
}

// readyProbePrefix starts the ReadIndex context of the readiness probe,
// which ends in a number drawn by each process: the leader answers a
// member's request to whichever of its processes listens when the answer
// arrives, and an answer to a previous process's probe (a commit index of
// then) would make this one ready before it caught up. The read batcher's
// contexts are 8 bytes long, so they never collide with it.
const readyProbePrefix = "kvd-ready-probe-"

// maxGather bounds gather's hold whatever the disk's fsync time, and
// maxGatherSkip the holds skipped after one that did not pay.
const (
	maxGather     = time.Millisecond
	maxGatherSkip = 64
)

// maxBatchEntries and maxBatchBytes bound one MsgProp (flushProposals):
// a follower forwards it to the leader whole, so it must stay far below
// the transport's frame limit; a proposal larger than maxBatchBytes goes
// alone.
const (
	maxBatchEntries = 1024
	maxBatchBytes   = 4 << 20
)

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	default:
		return "follower"
	}
}
