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
	result []command.ScanItem
}

func (s *listStore) Get([]byte, int64) (command.Item, bool, error) { return command.Item{}, false, nil }
func (s *listStore) Stats() fsm.Stats                              { return fsm.Stats{} }
func (s *listStore) ExpiredBefore(int64, int) ([]command.KeyCAS, error) {
	return nil, nil
}
func (s *listStore) Digest() (fsm.Digest, error)   { return fsm.Digest{}, nil }
func (s *listStore) ClusterVersion() uint64        { return command.ClusterVersionMax }
func (s *listStore) FlushHorizons() (int64, int64) { return 0, 0 }
func (s *listStore) HiddenAfter([]byte, int, int64, int64) ([]command.KeyCAS, []byte, error) {
	return nil, nil, nil
}

// scanStore answers ScanPage with result, then with pages in turn when set.
type scanStore struct {
	listStore
	pages  []scanPage
	onPage func() // after each page is served
}

type scanPage struct {
	items []command.ScanItem
	next  string
}

func (s *scanStore) ScanPage(prefix, after []byte, limit int, nowNs int64) ([]command.ScanItem, []byte, error) {
	s.calls = append(s.calls, string(prefix)+"|"+string(after))
	s.nowNs = nowNs
	if s.onPage != nil {
		defer s.onPage()
	}
	if s.pages == nil {
		return s.result, nil, nil
	}
	p := s.pages[0]
	s.pages = s.pages[1:]
	var next []byte
	if p.next != "" {
		next = []byte(p.next)
	}
	return p.items[:min(len(p.items), limit)], next, nil
}

func TestList(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clock := func() time.Time { return now }
	cfg := Config{RequestTimeout: time.Second}

	r := &barrierReplica{}
	st := &scanStore{listStore: listStore{result: []command.ScanItem{{Key: []byte("a")}}}}
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

func keysOf(items []command.ScanItem) []string {
	keys := make([]string, 0, len(items))
	for _, it := range items {
		keys = append(keys, string(it.Key))
	}
	return keys
}

func items(keys ...string) []command.ScanItem {
	out := make([]command.ScanItem, 0, len(keys))
	for _, k := range keys {
		out = append(out, command.ScanItem{Key: []byte(k)})
	}
	return out
}

// The store reads a listing one bounded page at a time, a page possibly
// short of limit (hidden items it stepped over) yet with a cursor: List
// follows the cursors until it has limit items or the range ends.
func TestListFollowsShortPages(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{RequestTimeout: time.Second}
	pages := func() []scanPage {
		return []scanPage{
			{nil, "h1"},                // only hidden items examined
			{items("a"), "h2"},         // one found, budget spent
			{items("b", "c", "d"), ""}, // to the end of the range
		}
	}
	cases := []struct {
		name  string
		limit int
		want  []string
		calls []string
	}{
		{"to the end", 10, []string{"a", "b", "c", "d"}, []string{"p|q", "p|h1", "p|h2"}},
		{"limit within the last page", 2, []string{"a", "b"}, []string{"p|q", "p|h1", "p|h2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &barrierReplica{}
			st := &scanStore{pages: pages()}
			s := New(cfg, r, st, logger, time.Now)
			got, err := s.List(context.Background(), Linearizable, []byte("p"), []byte("q"), tc.limit)
			require.NoError(t, err)
			require.Equal(t, tc.want, keysOf(got))
			require.Equal(t, tc.calls, st.calls)
			require.Equal(t, 1, r.barriers, "one barrier for the whole listing")
		})
	}

	// A client gone mid-walk stops it: a walk over millions of hidden items
	// must not outlive the request that asked for it.
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		st := &scanStore{pages: pages(), onPage: cancel}
		s := New(cfg, &barrierReplica{}, st, logger, time.Now)
		_, err := s.List(ctx, Local, []byte("p"), nil, 10)
		require.ErrorIs(t, err, context.Canceled)
		require.Len(t, st.calls, 1)
	})
}
