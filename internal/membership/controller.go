package membership

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/replica"
	"github.com/kvd-project/kvd/internal/transport"
)

// Replica is what the control plane asks of the raft member (replica.Replica).
type Replica interface {
	Status() replica.Status
	Progress() map[replica.NodeID]replica.Progress
	ChangeMember(ctx context.Context, reqID uint64, typ replica.ConfChangeType, id replica.NodeID, context []byte, force bool) (uint64, error)
	TransferLeadership(ctx context.Context, to replica.NodeID) (replica.NodeID, error)
}

// State is the applied member table and cluster version (fsm.FSM).
type State interface {
	Members() []fsm.Member
	// MembersAt is Members with the applied index it was read at.
	MembersAt() ([]fsm.Member, uint64)
	ClusterVersion() uint64
}

// Proposer puts a command through the log and returns its applied result
// (kv.Service): a member's addresses, a cluster version raise.
type Proposer interface {
	Do(ctx context.Context, c *command.Command) (command.Result, error)
}

// Config is what the control plane needs of the node's configuration.
type Config struct {
	// Name is this member's --name; its raft ID is IDOf(Name).
	Name string
	// RequestTimeout bounds each membership change and publication.
	RequestTimeout time.Duration
	// Transport is the peer transport's configuration but for the fields
	// the control plane fills (ClusterID, Peers, NotMember, OnNotMember).
	Transport transport.Config
	// Handler receives what the transport receives: the replica.
	Handler transport.Handler
	// HTTP calls the other members' HTTP APIs (NewHTTP); the zero value
	// is plain HTTP through http.DefaultClient.
	HTTP HTTP
}

// Controller runs the membership of one member.
type Controller struct {
	cfg    Config
	logger *slog.Logger
	file   *File
	rep    Replica
	state  State
	// Set by Run: how this node publishes itself, and through what.
	kv  Proposer
	adv Advertised

	// sender is the transport the replica sends through (nil: none yet);
	// loaded on every send, so not under peerMu.
	sender atomic.Pointer[transport.TCP]
	// The transport and its peers, kept equal to raft's configuration.
	peerMu    sync.Mutex
	peers     *transport.TCP // nil until there is a peer
	peerAddrs map[uint64]string
	// learned is the leader raft follows, when neither its configuration
	// nor the member table gave its address and another member's did
	// (leaderaddr.go); 0: none. Under peerMu.
	learned uint64
	// versionHeld is why the leader last kept the cluster version where
	// it was (logged when it changes); owned by Run's version watch.
	versionHeld string
	removed     chan struct{}
	removedOnce sync.Once
	// notMemberLogged: a leader's not-member refusal was logged at info.
	notMemberLogged atomic.Bool
}

// New builds the control plane of a member whose cluster began as file
// says, and the peer transport when the cluster has other members (not
// started: StartPeers starts it once the replica runs).
func New(cfg Config, file *File, rep Replica, state State, logger *slog.Logger) (*Controller, error) {
	c := &Controller{cfg: cfg, logger: logger, file: file, rep: rep, state: state, removed: make(chan struct{})}
	peers := map[uint64]string{}
	for _, m := range file.Members {
		if m.ID != uint64(IDOf(cfg.Name)) {
			peers[m.ID] = m.PeerAddr
		}
	}
	c.peerAddrs = maps.Clone(peers)
	// A group of one binds no peer port until a member is added.
	if len(peers) > 0 {
		tr, err := c.newTransport(peers)
		if err != nil {
			return nil, fmt.Errorf("peer transport: %w", err)
		}
		c.peers = tr
		c.sender.Store(tr)
	}
	return c, nil
}

// StartPeers starts the peer transport New made, if it made one.
func (c *Controller) StartPeers() {
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	if c.peers != nil {
		c.peers.Start()
	}
}

// Run keeps the transport's peers equal to raft's configuration, publishes
// this node's addresses adv through p, raises the cluster version when this
// node leads, and watches for this member's removal, until ctx ends.
func (c *Controller) Run(ctx context.Context, adv Advertised, p Proposer) {
	c.adv, c.kv = adv, p
	versionDone := make(chan struct{})
	go func() {
		defer close(versionDone)
		c.watchClusterVersion(ctx)
	}()
	c.watchMembers(ctx)
	<-versionDone
}

// Removed is closed once this member is found removed from the cluster.
func (c *Controller) Removed() <-chan struct{} { return c.removed }

// Close closes the peer transport.
func (c *Controller) Close() error {
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	if c.peers == nil {
		return nil
	}
	err := c.peers.Close()
	c.peers = nil
	return err
}

// Send implements replica.Transport: until the first peer is added there
// is nobody to send to.
func (c *Controller) Send(msgs []*pb.Message) {
	if t := c.sender.Load(); t != nil {
		t.Send(msgs)
	}
}

// Connected implements replica.Links: no peer is connected before the
// transport exists.
func (c *Controller) Connected(id uint64) bool {
	t := c.sender.Load()
	return t != nil && t.Connected(id)
}

func (c *Controller) newTransport(peers map[uint64]string) (*transport.TCP, error) {
	tc := c.cfg.Transport
	tc.ClusterID, tc.Peers = c.file.ClusterID, peers
	tc.NotMember, tc.OnNotMember = c.notMember, c.onNotMember
	return transport.NewTCP(tc, c.cfg.Handler, c.logger.With("component", "transport"))
}
