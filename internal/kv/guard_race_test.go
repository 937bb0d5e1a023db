package kv

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/replica"
)

// sweepReplica leads, is ready, and refuses every proposal (counting them).
type sweepReplica struct {
	Replica
	proposals atomic.Int64
}

func (r *sweepReplica) Status() replica.Status { return replica.Status{Role: "leader", Ready: true} }

func (r *sweepReplica) Propose(context.Context, time.Time, uint64, []byte) (*replica.Pending, error) {
	r.proposals.Add(1)
	return nil, replica.ErrBusy
}

// expiringStore always has one item due.
type expiringStore struct{ listStore }

func (s *expiringStore) ExpiredBefore(int64, int) ([]command.KeyCAS, error) {
	return []command.KeyCAS{{Key: []byte("gone"), CAS: 1}}, nil
}

var _ Store = (*expiringStore)(nil)

// TestGuardSpaceWhileSweeping: the node starts the expiry sweeper, whose
// Submit reads the space guard, before it calls GuardSpace. Under -race this
// failed while the guard was a plain field.
func TestGuardSpaceWhileSweeping(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	r := &sweepReplica{}
	s := New(Config{RequestTimeout: time.Second, ExpirySweepInterval: time.Millisecond}, r, &expiringStore{}, logger, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunExpirySweeper(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	g := NewSpaceGuard(1, func() (uint64, error) { return 1 << 30, nil }, logger)
	g.Check()
	deadline := time.After(10 * time.Second)
	for i := 0; r.proposals.Load() < 3; i++ {
		require.Less(t, i, 100000)
		s.GuardSpace(g)
		select {
		case <-deadline:
			t.Fatal("the sweeper proposed nothing")
		case <-time.After(time.Millisecond):
		}
	}
	require.Same(t, g, s.Space())
}
