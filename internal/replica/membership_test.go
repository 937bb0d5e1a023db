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

// TestChangeMemberDuringATransferSaysRetry: while a leadership transfer is
// in progress raft drops every proposal, configuration changes included.
// That refusal is passing (the transfer ends within an election timeout),
// so it must read as such, which clients and a joining node retry;
// raft's bare ErrProposalDropped was answered 400 by the HTTP API, and
// `kvd serve --join` gives up on a 4xx.
func TestChangeMemberDuringATransferSaysRetry(t *testing.T) {
	net := transport.NewMemNetwork()
	defer net.Close()
	// A transfer to an unreachable member stays pending for an election
	// timeout: three seconds here.
	reps, lead := startTrio(t, net, nil, func(c *Config) { c.ElectionTicks = 300 })
	r := reps[lead]
	target := reps[(lead+1)%3].Status().ID
	net.Cut(uint64(r.cfg.ID), uint64(target))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _, _ = r.TransferLeadership(ctx, target) }()
	require.Eventually(t, func() bool {
		return r.do(ctx, func() error {
			if r.rn.BasicStatus().LeadTransferee != uint64(target) {
				return ErrBusy
			}
			return nil
		}) == nil
	}, 5*time.Second, time.Millisecond, "the transfer never started")
	_, err := r.ChangeMember(ctx, 400, AddLearner, 4, nil, false)
	require.ErrorIs(t, err, ErrTransferring)
}
