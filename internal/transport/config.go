package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/tlsconf"
)

// NodeID identifies a raft member. It is never an address.
type NodeID = uint64

// Handler is the local node as the transport sees it (the replica).
//
// The transport calls Step from the reader goroutine of the connection the
// message arrived on, so messages from one peer are stepped in the order
// that peer sent them; Step may block (that is backpressure on the peer) but
// must return once ctx is done. ReportUnreachable and ReportSnapshot are
// called from one reporting goroutine, never from inside Send, so they may
// hand the report to the Ready loop through a channel; they must not block
// indefinitely, since Close waits for them.
type Handler interface {
	Step(ctx context.Context, m *pb.Message) error
	ReportUnreachable(id uint64)
	ReportSnapshot(id uint64, failed bool)
}

// Defaults for the zero fields of Config.
const (
	DefaultQueueSize    = 4096
	DefaultDialTimeout  = time.Second
	DefaultWriteTimeout = 5 * time.Second
	DefaultMaxBackoff   = time.Second
	// DefaultSnapshotTimeout is generous: a transfer moves the whole store.
	DefaultSnapshotTimeout = 30 * time.Minute

	// minBackoff is the first reconnect delay; it doubles per failed attempt
	// up to MaxBackoff, and each wait is jittered to between half and all of
	// the current step.
	minBackoff = 50 * time.Millisecond
)

// Config configures a TCP transport. Zero durations and sizes take the
// defaults above.
type Config struct {
	// ClusterID is exchanged in the handshake; peers whose ID differs are
	// refused (and refuse us), with the reason logged at warn.
	ClusterID uint64
	// LocalID is this node's raft ID; never 0.
	LocalID uint64
	// ListenAddr is the host:port to accept peers on ("127.0.0.1:0" picks a
	// free port; Addr reports the bound address).
	ListenAddr string
	// Peers are the initial peer addresses (host:port) by raft ID, excluding
	// LocalID. AddPeer and RemovePeer change the set at runtime.
	Peers map[uint64]string
	// QueueSize bounds each peer's outbound queue, in messages (default
	// 4096). A message sent to a full queue is dropped and the peer is
	// reported unreachable.
	QueueSize int
	// DialTimeout bounds a connection attempt including the handshake
	// (default 1s). WriteTimeout bounds one batched write (default 5s).
	DialTimeout, WriteTimeout time.Duration
	// MaxBackoff caps the reconnect delay (default 1s). Delays start at
	// 50ms, double on each failed attempt and are jittered.
	MaxBackoff time.Duration

	// Snapshots, when set, turns on snapshot streaming: a MsgSnap is sent as
	// a checkpoint of this store streamed on a connection of its own (see
	// the package documentation), and MsgSnap on a message connection is
	// refused. When nil, MsgSnap travels like any other message (tests).
	Snapshots SnapshotSource
	// SnapshotDir is where snapshots are staged, in snap-outgoing/ and
	// snap-incoming/ (both emptied by NewTCP); required with Snapshots. It
	// must be on the state store's filesystem, so that a received snapshot
	// can be renamed into place: kvd uses its data dir.
	SnapshotDir string
	// SnapshotTimeout bounds one snapshot transfer, checkpoint to verdict
	// (default 30m); each read or write within it may stall at most 30s,
	// except the sender's wait for the receiver's verdict (at most 2m).
	SnapshotTimeout time.Duration

	// NotMember, when set, is asked about every sender whose handshake is
	// otherwise acceptable. Refusing (refuse true) answers the handshake
	// with "not a member" and applied, the index as of which the sender is
	// not in the configuration, and closes the connection. vouched says
	// whether anything speaks for a sender the configuration may not list
	// yet: with peer TLS, a certificate marked kvd-member:NAME for it
	// (tlsconf.Vouched); without peer TLS nothing proves anything, so
	// every sender counts as vouched for. kvd's leader refuses every
	// sender outside its applied configuration; a follower, which may be
	// behind the configuration that added its new leader, only those
	// nobody vouched for.
	NotMember func(from uint64, vouched bool) (applied uint64, refuse bool)
	// OnNotMember, when set, is called from the peer's writer goroutine
	// when peer refused our connection as coming from a non-member, with
	// the index it gave. It must not block. Whether that means this node
	// was removed is the caller's judgement: a joiner may dial a leader
	// that has not applied its addition yet.
	OnNotMember func(peer, applied uint64)

	// TLS, when set, makes every peer connection, message and snapshot
	// stream alike, mutual TLS: the listener accepts only TLS, each side
	// presents its certificate and verifies the other's against the peer
	// CA, and each checks that the other's certificate names the member it
	// speaks for (see the package documentation). When nil, connections are
	// plaintext.
	TLS *tlsconf.Peer
	// IDOf maps a name a peer certificate is issued to (a DNS subject
	// alternative name, or the common name) to the raft ID of the member of
	// that name; required with TLS. kvd passes node.IDOf, the hash its
	// members' IDs are made with, so a certificate naming "kvd-2" speaks
	// for the member named kvd-2 and no other.
	IDOf func(name string) uint64
}

func (c *Config) setDefaults() {
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < minBackoff {
		c.MaxBackoff = minBackoff
	}
	if c.SnapshotTimeout <= 0 {
		c.SnapshotTimeout = DefaultSnapshotTimeout
	}
}

// validate reports every problem at once.
func (c *Config) validate() error {
	var errs []error
	if c.LocalID == 0 {
		errs = append(errs, errors.New("LocalID must not be 0"))
	}
	if c.ListenAddr == "" {
		errs = append(errs, errors.New("ListenAddr is empty"))
	}
	if c.Snapshots != nil && c.SnapshotDir == "" {
		errs = append(errs, errors.New("SnapshotDir is empty but Snapshots is set"))
	}
	if c.TLS != nil && c.IDOf == nil {
		errs = append(errs, errors.New("IDOf is nil but TLS is set: certificates could not be tied to members"))
	}
	for id, addr := range c.Peers {
		switch {
		case id == 0:
			errs = append(errs, fmt.Errorf("peer ID 0 (address %q) is not a valid raft ID", addr))
		case id == c.LocalID:
			errs = append(errs, fmt.Errorf("peer list contains the local ID %d", id))
		case addr == "":
			errs = append(errs, fmt.Errorf("peer %d has an empty address", id))
		}
	}
	return errors.Join(errs...)
}
