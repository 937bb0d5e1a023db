package fsm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// What a delayed flush_all hides is in no index: HiddenAfter finds it by
// reading the items in key order, a bounded stretch at a time, and the
// OpExpire the leader proposes for what it found deletes exactly those
// still hidden, bringing curr_items and bytes down.
func TestCrawlFindsWhatADelayedFlushHides(t *testing.T) {
	f := openTest(t, t.TempDir())
	defer f.Close()
	a := &applier{t: t, f: f}
	for i := range 10 {
		a.do(set(command.OpSet, fmt.Sprintf("k%02d", i), "v"))
	}
	a.do(command.Command{Op: command.OpFlush, Delay: 10, Stamp: t0})
	at, _ := f.FlushHorizons()
	require.Equal(t, t0+10e9, at)
	// Stored after the flush time: it stays.
	a.do(command.Command{Op: command.OpSet, Key: []byte("k05"), Value: []byte("new"), Stamp: t0 + 11e9})
	a.do(command.Command{Op: command.OpSet, Key: []byte("z"), Value: []byte("new"), Stamp: t0 + 11e9})

	t.Run("before the flush time nothing is hidden", func(t *testing.T) {
		hidden, next, err := f.HiddenAfter(nil, 100, 1<<20, t0+5e9)
		require.NoError(t, err)
		require.Empty(t, hidden)
		require.Nil(t, next, "one call read every item")
	})

	now := t0 + 12e9
	var found []command.KeyCAS
	var cursor []byte
	calls := 0
	for {
		hidden, next, err := f.HiddenAfter(cursor, 3, 1<<20, now)
		require.NoError(t, err)
		found = append(found, hidden...)
		calls++
		if next == nil {
			break
		}
		cursor = next
		require.Less(t, calls, 10, "the crawl moves on")
	}
	require.Equal(t, 4, calls, "11 items, 3 a call")
	var keys []string
	for _, kc := range found {
		keys = append(keys, string(kc.Key))
	}
	require.Equal(t, []string{"k00", "k01", "k02", "k03", "k04", "k06", "k07", "k08", "k09"}, keys)

	require.Equal(t, int64(11), f.Stats().Items)
	a.do(command.Command{Op: command.OpExpire, Expired: found, Stamp: now})
	st := f.Stats()
	require.Equal(t, int64(2), st.Items, "k05 and z are left")
	require.Equal(t, int64(2*len("new")), st.Bytes)
	hidden, next, err := f.HiddenAfter(nil, 100, 1<<20, now)
	require.NoError(t, err)
	require.Empty(t, hidden)
	require.Nil(t, next)

	t.Run("a call stops after its bytes", func(t *testing.T) {
		// Each item and key is a few bytes: 1 byte of budget reads one.
		_, next, err := f.HiddenAfter(nil, 100, 1, now)
		require.NoError(t, err)
		require.Equal(t, "k05", string(next))
	})
}
