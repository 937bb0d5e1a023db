package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/transport"
)

// TestProposalsDroppedByACandidateSayNoLeader: proposals that reach raft
// in the same loop iteration as the message that made the node a candidate
// (here a MsgTimeoutNow, as in a leadership transfer) are refused for want
// of a leader. They were answered ErrBusy ("too many requests in flight"),
// judged by the leader the last Ready had named.
func TestProposalsDroppedByACandidateSayNoLeader(t *testing.T) {
	net := transport.NewMemNetwork()
	defer net.Close()
	reps, lead := startTrio(t, net, nil)
	f := reps[(lead+1)%3]
	leader := reps[lead].Status().ID
	require.Eventually(t, func() bool { st := f.Status(); return st.Ready && st.Leader == leader },
		10*time.Second, time.Millisecond, "the follower never learned the leader")
	st := f.Status()

	release := holdLoop(t, f)
	wait := proposeQueued(t, f, 1, 10)
	require.NoError(t, f.Step(t.Context(), &pb.Message{
		Type: pb.MsgTimeoutNow.Enum(), From: new(uint64(leader)), To: new(uint64(st.ID)), Term: new(st.Term),
	}))
	release()
	for i, err := range wait() {
		require.ErrorIs(t, err, ErrNoLeader, "proposal %d", i)
	}
}
