package kv

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/replica"
)

// crawlReplica leads with the commit and applied indexes the test sets.
type crawlReplica struct {
	Replica
	commit, applied uint64
}

func (r *crawlReplica) Status() replica.Status {
	return replica.Status{Role: "leader", Ready: true, Commit: r.commit, Applied: r.applied}
}

// crawlStore has a delayed flush_all recorded and counts the crawl's reads;
// it finds nothing hidden, so the crawl proposes nothing.
type crawlStore struct {
	listStore
	flushAt, before int64
	reads           int
}

func (s *crawlStore) FlushHorizons() (int64, int64) { return s.flushAt, s.before }

func (s *crawlStore) HiddenAfter([]byte, int, int64, int64) ([]command.KeyCAS, []byte, error) {
	s.reads++
	return nil, []byte("k"), nil // more to read
}

// TestCrawlWaitsForApplied: a leader freshly elected may not yet have applied
// entries committed before the flush's time (writes it hides). A pass that
// read the store before they were applied would step over their keys and
// never delete them: the pass starts once this node has applied what was
// committed when the pass began.
func TestCrawlWaitsForApplied(t *testing.T) {
	flushAt := time.Unix(1_800_000_000, 0)
	now := flushAt.Add(time.Minute)
	r := &crawlReplica{commit: 100, applied: 40}
	st := &crawlStore{flushAt: flushAt.UnixNano()}
	s := New(Config{RequestTimeout: time.Second}, r, st, slog.New(slog.DiscardHandler), func() time.Time { return now })
	for _, step := range []struct {
		name            string
		commit, applied uint64
		wantReads       int
	}{
		{"behind what was committed when the pass began", 100, 40, 0},
		{"still behind it, with more committed since", 150, 99, 0},
		{"caught up with the pass's start, not with the commit index now", 180, 100, crawlCalls},
		{"behind again: the pass goes on", 200, 190, 2 * crawlCalls},
	} {
		r.commit, r.applied = step.commit, step.applied
		require.NoError(t, s.crawlFlushed(context.Background()), step.name)
		require.Equal(t, step.wantReads, st.reads, step.name)
	}
}

// TestCrawlForAReplacedHorizon: a delayed flush_all that replaces one whose
// time has passed keeps that time as the store's FlushedBefore, and what it
// hides is hidden for good. The leader crawls for it at once, not only once
// the new flush time has come (a day later, say); with no such time, a
// pending flush time is not crawled for.
func TestCrawlForAReplacedHorizon(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name      string
		before    time.Time
		wantReads int
	}{
		{"a passed horizon replaced", now.Add(-time.Minute), crawlCalls},
		{"nothing replaced", time.Time{}, 0},
		{"replaced too long ago", now.Add(-2 * crawlWindow), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &crawlStore{flushAt: now.Add(24 * time.Hour).UnixNano()}
			if !tc.before.IsZero() {
				st.before = tc.before.UnixNano()
			}
			s := New(Config{RequestTimeout: time.Second}, &crawlReplica{commit: 10, applied: 10}, st, slog.New(slog.DiscardHandler), func() time.Time { return now })
			require.NoError(t, s.crawlFlushed(t.Context()))
			require.Equal(t, tc.wantReads, st.reads)
		})
	}
}

// TestCrawlForALaterReplacedHorizon: from cluster version 2, a flush_all
// given an absolute time already past records that time as the last horizon,
// and the passed horizon it replaced, later than it, is kept as
// FlushedBefore. The crawl is for the later of the two: the older one, out
// of the crawl's window, made the leader crawl for neither, and what the
// replaced horizon hides for good stayed on disk and in curr_items.
func TestCrawlForALaterReplacedHorizon(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	st := &crawlStore{
		flushAt: now.Add(-2 * crawlWindow).UnixNano(), // "flush_all <a Unix time two hours ago>"
		before:  now.Add(-time.Minute).UnixNano(),     // the delayed flush_all it replaced, passed a minute ago
	}
	s := New(Config{RequestTimeout: time.Second}, &crawlReplica{commit: 10, applied: 10}, st, slog.New(slog.DiscardHandler), func() time.Time { return now })
	require.NoError(t, s.crawlFlushed(t.Context()))
	require.Equal(t, crawlCalls, st.reads)
	require.Equal(t, st.before, s.crawl.flushAt)
}
