package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnwaitedProposalsGiveBackTheirPlaces: a proposal counts against
// MaxPending until its outcome is delivered, whether or not its proposer
// ever waits for it; proposals nobody waited for used to keep their places
// for good, until every proposal was refused as busy.
func TestUnwaitedProposalsGiveBackTheirPlaces(t *testing.T) {
	r := startSolo(t, 0, func(c *Config) { c.MaxPending = 2 })
	ctx := t.Context()
	for round := range 3 {
		var last uint64
		for i := range 2 {
			id := uint64(1000*round + i + 1)
			_, err := r.Propose(ctx, time.Time{}, id, binary.BigEndian.AppendUint64(nil, id))
			require.NoError(t, err, "round %d proposal %d", round, i)
			last = id
		}
		// Not waited for: once applied they must leave the count (read live;
		// Status is published by the loop and may lag).
		require.Eventually(t, func() bool { return r.waits.size() == 0 }, 10*time.Second, time.Millisecond,
			"round %d: last request %d", round, last)
	}
}

// TestDeadlinesWithoutContexts: Propose and Wait give up at their
// deadline, or when their context ends, though the request's deadline is no
// longer a context. The disk takes half a second per append, so nothing
// proposed here is applied before the 20 ms deadlines.
func TestDeadlinesWithoutContexts(t *testing.T) {
	r := startSolo(t, 500*time.Millisecond, func(c *Config) { c.MaxPending = 1 << 20 })
	soon := func() time.Time { return time.Now().Add(20 * time.Millisecond) }
	var id atomic.Uint64
	propose := func(deadline time.Time) (*Pending, error) {
		n := id.Add(1)
		return r.Propose(t.Context(), deadline, n, binary.BigEndian.AppendUint64(nil, n))
	}

	t.Run("wait ends at the deadline", func(t *testing.T) {
		p, err := propose(time.Time{})
		require.NoError(t, err)
		_, err = p.Wait(t.Context(), soon())
		require.ErrorIs(t, err, ErrUnknownOutcome)
	})
	t.Run("wait ends with its context", func(t *testing.T) {
		p, err := propose(time.Time{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		_, err = p.Wait(ctx, time.Time{})
		require.ErrorIs(t, err, ErrUnknownOutcome)
	})
	t.Run("proposal refused at the deadline once the queue is full", func(t *testing.T) {
		// The queue holds 4096; the loop, asleep in a save, takes at most a
		// few batches meanwhile. Bounded: far more than that fits.
		var err error
		for i := 0; i < 64<<10 && err == nil; i++ {
			_, err = propose(soon())
		}
		require.ErrorIs(t, err, ErrTimeout)
	})
	t.Run("a stopped replica refuses at once", func(t *testing.T) {
		r.Stop()
		<-r.Done()
		_, err := propose(soon())
		require.ErrorIs(t, err, ErrStopped)
	})
}

// TestStatusCountsPendingLive: Status reports the waiters as they are, not
// as the loop last published them, so a client that has its answer never
// finds its write still pending (kvd_raft_proposals_pending; the metrics
// test caught the published count lagging behind under -race).
func TestStatusCountsPendingLive(t *testing.T) {
	r := &Replica{waits: newWaitRegistry()}
	r.status.Store(&Status{Pending: 5}) // a stale snapshot
	require.Equal(t, 0, r.Status().Pending)
	_, ok := r.waits.register(1)
	require.True(t, ok)
	require.Equal(t, 1, r.Status().Pending)
	require.True(t, r.waits.trigger(1, Outcome{}))
	require.Equal(t, 0, r.Status().Pending, "answered, so no longer pending")
}

// TestProposeRacingStopIsAnswered: Stop fails every waiter with
// ErrStopped. run's deferred cleanup fails the registered waiters
// (waits.failAll) and only afterwards closes done. A Propose that registers
// after failAll swapped the map, and checks done before it is closed, finds
// room in propc (nobody reads it any more) and returns a Pending nobody
// answers. Wait used to block until its deadline and report
// ErrUnknownOutcome for a write that was never proposed (and with no
// deadline, for good); it now watches done.
//
// The window is failAll's send loop: it is widened here by waiters that are
// registered directly (as many proposals in flight would be).
func TestProposeRacingStopIsAnswered(t *testing.T) {
	r := startSolo(t, 0, func(c *Config) { c.MaxPending = 1 << 22 })
	for i := uint64(1 << 40); i < 1<<40+300_000; i++ {
		_, ok := r.waits.register(i)
		require.True(t, ok)
	}
	var (
		next    atomic.Uint64
		mu      sync.Mutex
		pending []*Pending
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				id := next.Add(1)
				p, err := r.Propose(context.Background(), time.Time{}, id, binary.BigEndian.AppendUint64(nil, id))
				if errors.Is(err, ErrStopped) {
					return
				}
				if err == nil {
					mu.Lock()
					pending = append(pending, p)
					mu.Unlock()
				}
				// Paced, as clients are: the loop keeps up and the queue
				// has room, which is what makes the race possible.
				time.Sleep(20 * time.Microsecond)
			}
		}()
	}
	// The proposers start with the queue empty, as Stop begins.
	close(start)
	r.Stop()
	wg.Wait()
	// The replica is stopped: every outcome is due now. The deadline only
	// keeps a regression from hanging the test; nothing should reach it.
	t.Logf("%d proposals accepted while Stop ran", len(pending))
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pending {
		_, err := p.Wait(context.Background(), deadline)
		if err != nil {
			require.ErrorIs(t, err, ErrStopped, "a proposal accepted as Stop ran was not answered")
		}
	}
}
