package kv

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/replica"
)

type barrierReplica struct {
	Replica
	barriers int
	err      error
}

func (r *barrierReplica) ReadBarrier(context.Context) error {
	r.barriers++
	return r.err
}

func (r *barrierReplica) ReadsAreLocal() bool { return false }

type listStore struct {
	calls  []string // in order: "scan"
	nowNs  int64
	result []fsm.ScanItem
}

func (s *listStore) Get([]byte, int64) (fsm.Item, bool, error) { return fsm.Item{}, false, nil }
func (s *listStore) Stats() fsm.Stats                          { return fsm.Stats{} }
func (s *listStore) ExpiredBefore(int64, int) ([]command.KeyCAS, error) {
	return nil, nil
}
func (s *listStore) Digest() (fsm.Digest, error) { return fsm.Digest{}, nil }
func (s *listStore) FlushAt() int64              { return 0 }
func (s *listStore) HiddenAfter([]byte, int, int64, int64) ([]command.KeyCAS, []byte, error) {
	return nil, nil, nil
}

type scanStore struct{ listStore }

func (s *scanStore) Scan(prefix, after []byte, limit int, nowNs int64) ([]fsm.ScanItem, error) {
	s.calls = append(s.calls, string(prefix)+"|"+string(after))
	s.nowNs = nowNs
	return s.result, nil
}

func TestList(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clock := func() time.Time { return now }
	cfg := Config{RequestTimeout: time.Second}

	r := &barrierReplica{}
	st := &scanStore{listStore{result: []fsm.ScanItem{{Key: []byte("a")}}}}
	s := New(cfg, r, st, logger, clock)
	items, err := s.List(context.Background(), Linearizable, []byte("p"), []byte("q"), 10)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.Equal(t, 1, r.barriers, "a linearizable listing takes a read barrier")
	require.Equal(t, []string{"p|q"}, st.calls)
	require.Equal(t, now.UnixNano(), st.nowNs, "expiry is judged by the reader's clock")

	_, err = s.List(context.Background(), Local, nil, nil, 10)
	require.NoError(t, err)
	require.Equal(t, 1, r.barriers, "a local listing takes none")

	r.err = replica.ErrNoLeader
	_, err = s.List(context.Background(), Linearizable, nil, nil, 10)
	require.ErrorIs(t, err, replica.ErrNoLeader)
	require.Len(t, st.calls, 2, "no scan after a failed barrier")

	s = New(cfg, &barrierReplica{}, &listStore{}, logger, clock)
	_, err = s.List(context.Background(), Local, nil, nil, 10)
	require.True(t, errors.Is(err, ErrListUnsupported))
}
