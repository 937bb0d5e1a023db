package replica

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
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

// TestSecondChangeWhilePendingSaysRetry: raft turns a configuration change
// proposed while another is still unapplied into an empty entry and says
// nothing, so the second change's caller waited out its whole timeout and
// then heard that the change "may still apply", which it never would. It
// must hear at once that another change is in progress.
func TestSecondChangeWhilePendingSaysRetry(t *testing.T) {
	net := transport.NewMemNetwork()
	defer net.Close()
	// The leader keeps leading, cut off, for an election timeout: 3 s.
	reps, lead := startTrio(t, net, nil, func(c *Config) { c.ElectionTicks = 300 })
	r := reps[lead]
	for i := range reps {
		if i != lead {
			net.Cut(uint64(r.cfg.ID), uint64(reps[i].Status().ID))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := r.ChangeMember(ctx, 500, AddLearner, 4, nil, false)
		first <- err
	}()
	require.Eventually(t, func() bool {
		return r.do(ctx, func() error {
			if r.rn.BasicStatus().GetCommit() >= r.rn.Status().Progress[uint64(r.cfg.ID)].Match {
				return ErrBusy // the first change is not in the log yet
			}
			return nil
		}) == nil
	}, 5*time.Second, time.Millisecond, "the first change never reached the leader's log")
	_, err := r.ChangeMember(ctx, 501, AddLearner, 5, nil, false)
	require.ErrorIs(t, err, ErrChangeInProgress)
	cancel()
	require.Error(t, <-first)
}

// gatedConfSM is an echoSM whose apply of a configuration change waits for
// release, after saying so on entered.
type gatedConfSM struct {
	echoSM
	entered, release chan struct{}
}

func (g *gatedConfSM) Apply(ents []Entry) ([]command.Result, error) {
	for _, e := range ents {
		if e.Conf != nil {
			close(g.entered)
			<-g.release
		}
	}
	return g.echoSM.Apply(ents)
}

// TestChangeMemberAnswersAfterTheStateMachineApplies: the member table is
// the state machine's, written when it applies the change. A join answered
// before that could list members without the one it just added, and a
// caller that reads the table after its change could miss it.
func TestChangeMemberAnswersAfterTheStateMachineApplies(t *testing.T) {
	sm := &gatedConfSM{entered: make(chan struct{}), release: make(chan struct{})}
	r := startSoloWith(t, sm, 0)
	var once sync.Once
	release := func() { once.Do(func() { close(sm.release) }) }
	t.Cleanup(release) // before the replica's own cleanup stops its loop
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type answer struct {
		index uint64
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		index, err := r.ChangeMember(ctx, 600, AddLearner, 2, nil, false)
		done <- answer{index, err}
	}()
	<-sm.entered
	select {
	case a := <-done:
		t.Fatalf("answered (%d, %v) while the state machine was still applying the change", a.index, a.err)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	a := <-done
	require.NoError(t, a.err)
	require.GreaterOrEqual(t, sm.AppliedIndex(), a.index)
}
