package replica

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/transport"
)

// TestLastVoterIsNeverRemoved: raft stops a node that applies a
// configuration without voters, at every restart after it too, so the
// removal of the last voter is refused before it is proposed, forced or not.
func TestLastVoterIsNeverRemoved(t *testing.T) {
	r := startSolo(t, 0)
	for i, force := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := r.ChangeMember(ctx, uint64(100+i), RemoveMember, 1, nil, force)
		cancel()
		require.ErrorIs(t, err, ErrLastVoter, "force=%v", force)
	}
	// Still the leader of a working group.
	require.Equal(t, NodeID(1), r.Status().Leader)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := r.Propose(ctx, time.Time{}, 200, binary.BigEndian.AppendUint64(nil, 200)) // echoSM answers it
	require.NoError(t, err)
	_, err = p.Wait(ctx, time.Time{})
	require.NoError(t, err)
}

// TestChangeMemberReturnsItsIndex: a change answers with the index of its
// own entry, which a joiner keeps as the point its membership starts from.
func TestChangeMemberReturnsItsIndex(t *testing.T) {
	net := transport.NewMemNetwork()
	defer net.Close()
	reps, lead := startTrio(t, net, nil)
	r := reps[lead]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A learner that never starts: the leader only queues messages for it.
	added, err := r.ChangeMember(ctx, 300, AddLearner, 4, nil, false)
	require.NoError(t, err)
	require.NotZero(t, added)
	removed, err := r.ChangeMember(ctx, 301, RemoveMember, 4, nil, false)
	require.NoError(t, err)
	require.Equal(t, added+1, removed, "no other entry was proposed between the two")
}
