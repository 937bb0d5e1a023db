package kv

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/replica"
)

// versionStore is at the cluster version the test sets.
type versionStore struct {
	listStore
	version uint64
}

func (s *versionStore) ClusterVersion() uint64 { return s.version }

// proposeReplica counts what is proposed to it and refuses it.
type proposeReplica struct {
	crawlReplica
	proposed int
}

var errRefused = errors.New("refused by the test")

func (r *proposeReplica) Propose(context.Context, time.Time, uint64, []byte) (*replica.Pending, error) {
	r.proposed++
	return nil, errRefused
}

// TestSubmitWaitsForTheClusterVersion: an operation that not every member
// applies yet is refused before it is proposed (proposed, it would stop
// every member still on an older kvd), and proposed once the cluster is
// at its version; older operations are proposed at any version.
func TestSubmitWaitsForTheClusterVersion(t *testing.T) {
	st := &versionStore{version: 3}
	r := &proposeReplica{}
	s := New(Config{RequestTimeout: time.Second}, r, st, slog.New(slog.DiscardHandler), time.Now)
	_, err := s.Submit(context.Background(), &command.Command{Op: command.OpArith, Key: []byte("n"), Delta: 1, Create: true})
	require.ErrorIs(t, err, ErrClusterVersion)
	require.Contains(t, err.Error(), "needs cluster version 4, the cluster is at 3")
	require.Zero(t, r.proposed)

	_, err = s.Submit(context.Background(), &command.Command{Op: command.OpIncr, Key: []byte("n"), Delta: 1})
	require.ErrorIs(t, err, errRefused)
	require.Equal(t, 1, r.proposed, "incr needs no new version")

	st.version = 4
	_, err = s.Submit(context.Background(), &command.Command{Op: command.OpArith, Key: []byte("n"), Delta: 1})
	require.ErrorIs(t, err, errRefused)
	require.Equal(t, 2, r.proposed, "at version 4 arith is proposed")
}
