package replica

import (
	"context"
	"encoding/binary"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/transport"
)

// propCounter counts the proposal messages a replica sends, and the
// entries they carry.
type propCounter struct {
	Transport
	mu            sync.Mutex
	msgs, entries int
}

func (c *propCounter) Send(msgs []*pb.Message) {
	c.mu.Lock()
	for _, m := range msgs {
		if m.GetType() == pb.MsgProp {
			c.msgs++
			c.entries += len(m.GetEntries())
		}
	}
	c.mu.Unlock()
	c.Transport.Send(msgs)
}

func (c *propCounter) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.msgs, c.entries
}

// holdLoop stops r's Ready loop until the returned function is called, so
// that what is sent to it meanwhile queues up as it does behind a slow
// fsync.
func holdLoop(t *testing.T, r *Replica) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	r.adminc <- func() { close(held); <-done }
	<-held
	return func() { close(done) }
}

// proposeQueued proposes n writes with IDs from first on, returning once
// each is queued, and then the function that waits for all their outcomes.
func proposeQueued(t *testing.T, r *Replica, first uint64, n int) (wait func() []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	pend := make([]*Pending, n)
	for i := range pend {
		id := first + uint64(i)
		p, err := r.Propose(ctx, time.Time{}, id, binary.BigEndian.AppendUint64(nil, id))
		require.NoError(t, err)
		pend[i] = p
	}
	return func() []error {
		defer cancel()
		errs := make([]error, n)
		for i, p := range pend {
			_, errs[i] = p.Wait(ctx, time.Time{})
		}
		return errs
	}
}

// TestFollowerForwardsQueuedProposalsAsOneMessage: proposals that queue up
// on a follower while its loop is busy reach the leader as one message per
// batch (at most maxBatchEntries entries each), not one message apiece, and
// every one of them is applied.
func TestFollowerForwardsQueuedProposalsAsOneMessage(t *testing.T) {
	f, c := followerWrapped(t, func(tr Transport) *propCounter { return &propCounter{Transport: tr} })

	cases := []struct{ proposals, messages int }{
		{64, 1},
		{maxBatchEntries + 1, 2},
	}
	next := uint64(1)
	for _, tc := range cases {
		msgs0, ents0 := c.counts()
		release := holdLoop(t, f)
		wait := proposeQueued(t, f, next, tc.proposals)
		next += uint64(tc.proposals)
		release()
		for i, err := range wait() {
			require.NoError(t, err, "proposal %d of %d", i, tc.proposals)
		}
		msgs, ents := c.counts()
		require.Equal(t, tc.messages, msgs-msgs0, "MsgProp messages for %d proposals", tc.proposals)
		require.Equal(t, tc.proposals, ents-ents0, "entries forwarded")
	}
}

// TestRefusedBatchFailsEveryProposal: raft takes or refuses a batch whole;
// when it refuses one (here: no leader to forward to) every proposal in it
// is answered with the reason, none is left to wait for its timeout.
func TestRefusedBatchFailsEveryProposal(t *testing.T) {
	net := transport.NewMemNetwork()
	defer net.Close()
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	// One voter of three, alone: it never has a leader.
	r, err := New(Config{ID: 1, Peers: []NodeID{1, 2, 3}, TickInterval: 10 * time.Millisecond},
		l, &echoSM{}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	tr := net.Transport(1, r)
	defer func() { require.NoError(t, tr.Close()) }()
	require.NoError(t, r.Start(tr))
	defer r.Stop()

	release := holdLoop(t, r)
	wait := proposeQueued(t, r, 1, 10)
	release()
	// A proposal left waiting would end with its context, as
	// ErrUnknownOutcome: ErrNoLeader says the refusal answered it.
	for i, err := range wait() {
		require.ErrorIs(t, err, ErrNoLeader, "proposal %d", i)
	}
}

func TestPersistedFirst(t *testing.T) {
	ents := func(from, to uint64) []*pb.Entry {
		var out []*pb.Entry
		for i := from; i <= to; i++ {
			out = append(out, &pb.Entry{Index: new(i), Term: new(uint64(1))})
		}
		return out
	}
	idx := func(es []*pb.Entry) []uint64 {
		out := []uint64{}
		for _, e := range es {
			out = append(out, e.GetIndex())
		}
		return out
	}
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(3)), Term: new(uint64(1))}}
	cases := []struct {
		name        string
		rd          raft.Ready
		early, late []uint64
	}{
		{"nothing committed", raft.Ready{Entries: ents(5, 6)}, []uint64{}, []uint64{}},
		{"no new entries: all on disk", raft.Ready{CommittedEntries: ents(3, 5)}, []uint64{3, 4, 5}, []uint64{}},
		{"all below the new entries", raft.Ready{CommittedEntries: ents(3, 5), Entries: ents(6, 8)}, []uint64{3, 4, 5}, []uint64{}},
		{"some committed in this Ready", raft.Ready{CommittedEntries: ents(3, 7), Entries: ents(6, 8)}, []uint64{3, 4, 5}, []uint64{6, 7}},
		{"all committed in this Ready", raft.Ready{CommittedEntries: ents(6, 7), Entries: ents(6, 8)}, []uint64{}, []uint64{6, 7}},
		{"new entries overwrite uncommitted ones", raft.Ready{CommittedEntries: ents(3, 4), Entries: ents(5, 5)}, []uint64{3, 4}, []uint64{}},
		{"snapshot first", raft.Ready{Snapshot: snap, CommittedEntries: ents(4, 5)}, []uint64{}, []uint64{4, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			early, late := persistedFirst(tc.rd)
			require.Equal(t, tc.early, idx(early))
			require.Equal(t, tc.late, idx(late))
		})
	}
}

func TestBeforeDisk(t *testing.T) {
	msg := func(typ pb.MessageType) *pb.Message { return &pb.Message{Type: typ.Enum()} }
	types := func(ms []*pb.Message) []pb.MessageType {
		out := []pb.MessageType{}
		for _, m := range ms {
			out = append(out, m.GetType())
		}
		return out
	}
	now, later := beforeDisk([]*pb.Message{
		msg(pb.MsgApp), msg(pb.MsgAppResp), msg(pb.MsgProp), msg(pb.MsgVoteResp), msg(pb.MsgReadIndex),
		msg(pb.MsgHeartbeatResp), msg(pb.MsgPreVoteResp), msg(pb.MsgVote), msg(pb.MsgHeartbeat),
	})
	require.Equal(t, []pb.MessageType{pb.MsgApp, pb.MsgProp, pb.MsgReadIndex, pb.MsgHeartbeatResp, pb.MsgVote, pb.MsgHeartbeat}, types(now))
	require.Equal(t, []pb.MessageType{pb.MsgAppResp, pb.MsgVoteResp, pb.MsgPreVoteResp}, types(later))

	// Nothing to hold back: the messages go as they are.
	all := []*pb.Message{msg(pb.MsgApp), msg(pb.MsgHeartbeat)}
	now, later = beforeDisk(all)
	require.Equal(t, all, now)
	require.Empty(t, later)
}
