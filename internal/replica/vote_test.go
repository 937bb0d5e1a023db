package replica

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/raftlog"
)

// sentLog records the messages a replica sends.
type sentLog struct {
	mu   sync.Mutex
	msgs []*pb.Message
}

func (s *sentLog) Send(msgs []*pb.Message) {
	s.mu.Lock()
	s.msgs = append(s.msgs, msgs...)
	s.mu.Unlock()
}

func (s *sentLog) granted(typ pb.MessageType) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if m.GetType() == typ && !m.GetReject() {
			return true
		}
	}
	return false
}

// TestJustStartedMemberRefusesVotesInLeaseMode: a follower that acknowledged
// a leader's lease round and restarted at once must not vote for another
// member before the lease could have run out. It voted for the first
// candidate that asked (raft forgets whom it last heard from when it
// restarts), so a member cut off from the leader could be elected while the
// leader still served reads from its lease.
func TestJustStartedMemberRefusesVotesInLeaseMode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lease     bool
		typ       pb.MessageType
		context   string
		ticked    bool // the member has run ElectionTicks ticks
		wantGrant bool
	}{
		{name: "vote just after start", lease: true, typ: pb.MsgVote},
		{name: "pre-vote just after start", lease: true, typ: pb.MsgPreVote},
		{name: "leadership transfer's vote", lease: true, typ: pb.MsgVote, context: campaignTransfer, wantGrant: true},
		{name: "vote an election timeout after start", lease: true, typ: pb.MsgVote, ticked: true, wantGrant: true},
		{name: "vote without lease reads", typ: pb.MsgVote, wantGrant: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
			require.NoError(t, err)
			sent := &sentLog{}
			// No tick fires during the test: the member stays just started.
			cfg := Config{ID: 2, Peers: []NodeID{1, 2, 3}, TickInterval: time.Hour, ElectionTicks: 10, LeaseReads: tc.lease}
			r, err := New(cfg, l, &echoSM{}, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			require.NoError(t, r.Start(sent))
			t.Cleanup(func() {
				r.Stop()
				require.NoError(t, l.Close())
			})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.NoError(t, r.do(ctx, func() error {
				if tc.ticked {
					r.ticks = uint64(r.cfg.ElectionTicks)
				}
				term := r.rn.BasicStatus().GetTerm() + 1
				r.step(&pb.Message{
					Type: tc.typ.Enum(), From: new(uint64(3)), To: new(uint64(2)), Term: new(term),
					LogTerm: new(uint64(100)), Index: new(uint64(100)), Context: []byte(tc.context),
				})
				return nil
			}))
			// The loop handles the Ready of that step before it runs the next
			// operation: the answer, if any, has been sent.
			require.NoError(t, r.do(ctx, func() error { return nil }))
			resp := pb.MsgVoteResp
			if tc.typ == pb.MsgPreVote {
				resp = pb.MsgPreVoteResp
			}
			require.Equal(t, tc.wantGrant, sent.granted(resp))
		})
	}
}
