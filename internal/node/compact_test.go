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
	write := func(i int) {
		_, err := s.kv.Do(ctx, &command.Command{Op: command.OpSet, Key: []byte(fmt.Sprintf("k%d", i)), Value: value(i)})
		require.NoError(t, err)
	}
	n := 0
	for ; n < writes; n++ {
		write(n)
	}
	// The log may be compacted only up to keep bytes behind what the state
	// store holds on disk, and the store flushes in the background, seen
	// done at a later compaction: how far its durable index lags depends on
	// how long flushes take. So the test writes on until the first writes
	// are durable (a few more, bounded), and judges the bound against it.
	for ; s.sm.Stats().Durable < writes && n < 10*writes; n++ {
		write(n)
	}
	durable := s.sm.Stats().Durable
	require.GreaterOrEqual(t, durable, uint64(writes), "the state store's flushes never made its writes durable")
	first, err := s.log.FirstIndex()
	require.NoError(t, err)
	last, err := s.log.LastIndex()
	require.NoError(t, err)
	require.LessOrEqual(t, durable, last)
	// Behind the durable index at most every+keep bytes of entries stay,
	// plus one entry of slack for the batch that crossed the limit.
	maxEntries := uint64((every+keep)/valueSize + 2)
	require.LessOrEqual(t, durable-first+1, maxEntries, "log holds %d entries up to the durable index %d (%d..%d)", durable-first+1, durable, first, last)

	s.close()
	s = openStackWith(t, fs, "/data", logger, cfg)
	defer s.close()
	for i := 0; i < n; i++ {
		it, ok, err := s.sm.Get([]byte(fmt.Sprintf("k%d", i)), time.Now().UnixNano())
		require.NoError(t, err)
		require.True(t, ok, "k%d lost", i)
		require.Equal(t, value(i), it.Value, "k%d", i)
	}
}
