package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/replica"
)

// TestLogCompactionIsBoundedByBytes writes values large enough that the
// byte limits, not the entry counts, decide when the raft log is compacted
// and how much of it is kept; then it restarts the node and reads every
// value back.
func TestLogCompactionIsBoundedByBytes(t *testing.T) {
	const (
		valueSize = 8 << 10
		every     = 128 << 10 // 16 values
		keep      = 64 << 10  // 8 values
		writes    = 200
	)
	fs := vfs.NewMem()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := replica.Config{
		ID: 1, Peers: []replica.NodeID{1}, TickInterval: 10 * time.Millisecond,
		// Counts far beyond this test's writes: only bytes can trigger.
		CompactEvery: 1 << 20, CompactKeep: 1 << 20,
		CompactEveryBytes: every, CompactKeepBytes: keep,
	}
	s := openStackWith(t, fs, "/data", logger, cfg)
	value := func(i int) []byte {
		v := make([]byte, valueSize)
		copy(v, fmt.Sprintf("value %d", i))
		return v
	}
	ctx := context.Background()
	for i := 0; i < writes; i++ {
		_, err := s.kv.Do(ctx, &command.Command{Op: command.OpSet, Key: []byte(fmt.Sprintf("k%d", i)), Value: value(i)})
		require.NoError(t, err)
	}
	first, err := s.log.FirstIndex()
	require.NoError(t, err)
	last, err := s.log.LastIndex()
	require.NoError(t, err)
	require.Greater(t, first, uint64(writes/2), "the log was never compacted by bytes")
	// At most every+keep bytes of entries stay, plus one entry of slack for
	// the batch that crossed the limit.
	maxEntries := uint64((every+keep)/valueSize + 2)
	require.LessOrEqual(t, last-first+1, maxEntries, "log holds %d entries (%d..%d)", last-first+1, first, last)

	s.close()
	s = openStackWith(t, fs, "/data", logger, cfg)
	defer s.close()
	for i := 0; i < writes; i++ {
		it, ok, err := s.sm.Get([]byte(fmt.Sprintf("k%d", i)), time.Now().UnixNano())
		require.NoError(t, err)
		require.True(t, ok, "k%d lost", i)
		require.Equal(t, value(i), it.Value, "k%d", i)
	}
}
