package fsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// TestFlushInBatchReleasesEarlierWrites: a flush_all drops the cache updates
// of the writes before it in its batch; their values must not stay reachable
// from Apply's scratch slice after the batch (the slice is reused, and only
// what later batches overwrite would ever be released).
func TestFlushInBatchReleasesEarlierWrites(t *testing.T) {
	f := openTest(t, t.TempDir())
	defer f.Close()
	a := &applier{t: t, f: f}
	big := string(bytes.Repeat([]byte("v"), 64<<10))
	ents := []Entry{
		a.entry(set(command.OpSet, "a", big)),
		a.entry(set(command.OpSet, "b", big)),
		a.entry(set(command.OpSet, "c", big)),
		a.entry(command.Command{Op: command.OpFlush}),
		a.entry(set(command.OpSet, "d", "x")),
	}
	_, err := f.Apply(ents)
	require.NoError(t, err)
	for i, w := range f.cacheWrites[:cap(f.cacheWrites)] {
		require.Nil(t, w.key, "slot %d still holds key %q", i, w.key)
		require.Nil(t, w.enc, "slot %d still holds %d bytes", i, len(w.enc))
	}
	_, ok, err := f.Get([]byte("d"), t0)
	require.NoError(t, err)
	require.True(t, ok)
}
