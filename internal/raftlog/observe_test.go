package raftlog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ObserveSync sees every fsynced commit, and Stats still counts them.
func TestObserveSync(t *testing.T) {
	var seen []time.Duration
	l, _ := openTest(t, Options{ObserveSync: func(d time.Duration) { seen = append(seen, d) }})
	require.NoError(t, l.Save(hardState(1, 1, 0), entries(1, 3, 1)))
	require.NoError(t, l.Save(hardState(1, 1, 2), entries(4, 5, 1)))
	st := l.Stats()
	require.Equal(t, st.SyncCount, uint64(len(seen)))
	require.GreaterOrEqual(t, len(seen), 2)
	var sum time.Duration
	for _, d := range seen {
		require.Positive(t, d)
		sum += d
	}
	require.Equal(t, st.SyncDuration, sum)
}
