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

// proposeReplica counts what is proposed to it, keeps the last entry, and
// refuses it.
type proposeReplica struct {
	crawlReplica
	proposed int
	last     []byte
}

var errRefused = errors.New("refused by the test")

func (r *proposeReplica) Propose(_ context.Context, _ time.Time, _ uint64, data []byte) (*replica.Pending, error) {
	r.proposed++
	r.last = data
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

// TestMetaWritesWaitForVersion5: the meta writes are refused below cluster
// version 5, before anything is proposed, and proposed from it on; ms in
// append or prepend mode is stamped with the item size limit, as append is.
func TestMetaWritesWaitForVersion5(t *testing.T) {
	st := &versionStore{version: 4}
	r := &proposeReplica{}
	s := New(Config{RequestTimeout: time.Second, MaxItemSize: 1 << 20}, r, st, slog.New(slog.DiscardHandler), time.Now)
	ops := []command.Command{
		{Op: command.OpMetaGet, Key: []byte("k"), Meta: command.MetaHasTTL, Exptime: 10},
		{Op: command.OpMetaStore, Key: []byte("k"), Mode: command.ModeSet, Value: []byte("v")},
		{Op: command.OpMetaDelete, Key: []byte("k"), Meta: command.MetaInvalidate},
		{Op: command.OpMetaArith, Key: []byte("k"), Delta: 1},
		{Op: command.OpAccess, Accessed: []command.KeyCAS{{Key: []byte("k"), CAS: 1}}},
	}
	for _, c := range ops {
		_, err := s.Submit(context.Background(), &c)
		require.ErrorIs(t, err, ErrClusterVersion, "%s", c.Op)
		require.Contains(t, err.Error(), "needs cluster version 5, the cluster is at 4")
	}
	require.Zero(t, r.proposed)

	st.version = 5
	for i, c := range ops {
		_, err := s.Submit(context.Background(), &c)
		require.ErrorIs(t, err, errRefused, "%s", c.Op)
		require.Equal(t, i+1, r.proposed, "at version 5 %s is proposed", c.Op)
	}

	for _, tc := range []struct {
		mode byte
		want uint32
	}{{command.ModeAppend, 1 << 20}, {command.ModePrepend, 1 << 20}, {command.ModeSet, 0}, {command.ModeAdd, 0}} {
		_, err := s.Submit(context.Background(), &command.Command{Op: command.OpMetaStore, Key: []byte("k"), Mode: tc.mode, Value: []byte("v")})
		require.ErrorIs(t, err, errRefused)
		var got command.Command
		require.NoError(t, command.Decode(r.last, &got))
		require.Equal(t, tc.want, got.MaxSize, "mode %c", tc.mode)
	}
}
