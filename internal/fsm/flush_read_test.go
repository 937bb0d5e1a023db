package fsm

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// TestReadNeverShowsAnItemAFlushHid races reads against a flush_all that
// follows a passed delayed one. An item the passed horizon hides must stay
// unseen throughout: before the second flush it is hidden, after it the
// item is deleted (an immediate flush) or dropped (a delayed one). A read
// that took the item before the second flush's commit and the horizon after
// it used to return the item. Get and Scan both, with and without the
// item cache. Bounded in rounds and time; the old read order failed within
// a few hundred rounds.
func TestReadNeverShowsAnItemAFlushHid(t *testing.T) {
	reads := map[string]func(f *FSM, now int64) (bool, error){
		"get": func(f *FSM, now int64) (bool, error) {
			_, ok, err := f.Get([]byte("x"), now)
			return ok, err
		},
		"scan": func(f *FSM, now int64) (bool, error) {
			items, err := f.Scan([]byte("x"), nil, 10, now)
			return len(items) > 0, err
		},
	}
	for _, read := range []string{"get", "scan"} {
		for _, cache := range []bool{true, false} {
			for _, tc := range []struct {
				delayed bool
				version uint64 // 3: the passed horizon is kept, not its items deleted
			}{{false, 1}, {true, 1}, {true, 3}} {
				name := fmt.Sprintf("%s/cache=%v/delayed=%v/version=%d", read, cache, tc.delayed, tc.version)
				t.Run(name, func(t *testing.T) {
					raceFlushAgainstReads(t, reads[read], cache, tc.delayed, tc.version)
				})
			}
		}
	}
}

func raceFlushAgainstReads(t *testing.T, read func(f *FSM, now int64) (bool, error), cache, delayed bool, version uint64) {
	opts := Options{}
	if !cache {
		opts.ItemCacheBytes = -1
	}
	f, err := Open(t.TempDir(), discardLogger(), opts)
	require.NoError(t, err)
	defer f.Close()
	a := &applier{t: t, f: f}
	if version > 1 {
		a.do(command.Command{Op: command.OpClusterVersion, ClusterVersion: version})
	}
	var phase atomic.Int64 // odd while x is hidden or deleted
	var seen atomic.Int64
	rs := startReaders(2, func(int) func() error {
		return func() error {
			p := phase.Load()
			ok, err := read(f, t0+5e9)
			if err != nil {
				return err
			}
			if ok && p%2 == 1 && phase.Load() == p {
				seen.Add(1)
			}
			return nil
		}
	})
	deadline := time.Now().Add(1500 * time.Millisecond)
	rounds := 0
	for ; rounds < 400 && time.Now().Before(deadline) && seen.Load() == 0; rounds++ {
		if version >= 3 {
			// The last round's kept horizon would hide x from the start.
			a.do(command.Command{Op: command.OpFlush, Stamp: t0})
		}
		a.do(set(command.OpSet, "x", "v"))                              // stored at t0
		a.do(command.Command{Op: command.OpFlush, Delay: 1, Stamp: t0}) // hides x from t0+1s
		phase.Add(1)
		rs.await(5)
		if delayed {
			a.do(command.Command{Op: command.OpFlush, Delay: 100, Stamp: t0 + 2e9})
		} else {
			a.do(command.Command{Op: command.OpFlush, Stamp: t0 + 2e9})
		}
		rs.await(5)
		phase.Add(1)
	}
	rs.finish(t)
	require.Zero(t, seen.Load(), "a read returned an item a passed flush_all horizon hides (%d rounds)", rounds)
}

// TestVersionOneFarFutureExpiry: kvd before version 2 items took any 64-bit
// ttl from the HTTP API, in seconds. A "never" such as 9999999999 s is past
// the last Unix nanosecond; it must read as that nanosecond (as new writes
// are clamped), not wrap into the past and lose the item at the upgrade. A
// negative version 1 expiry stays expired.
func TestVersionOneFarFutureExpiry(t *testing.T) {
	cases := []struct {
		sec     int64
		want    int64
		visible bool
	}{
		{9999999999, math.MaxInt64, true},
		{math.MaxInt64, math.MaxInt64, true},
		{math.MaxInt64 / int64(1e9), (math.MaxInt64 / int64(1e9)) * 1e9, true},
		{t0/1e9 + 10, (t0/1e9 + 10) * 1e9, true},
		{t0 / 1e9, t0, false},
		{-5, 1, false},
		{math.MinInt64, 1, false},
	}
	dir := t.TempDir()
	f := openTest(t, dir)
	a := &applier{t: t, f: f}
	for i := range cases {
		c := set(command.OpSet, fmt.Sprintf("k%d", i), "v")
		c.Exptime = 10
		a.do(c)
	}
	for i, tc := range cases {
		key := dataKey(nil, fmt.Appendf(nil, "k%d", i))
		raw, closer, err := f.db.Get(key)
		require.NoError(t, err)
		v1 := append([]byte(nil), raw...)
		require.NoError(t, closer.Close())
		v1[0] = itemVersionSec
		binary.BigEndian.PutUint64(v1[5:], uint64(tc.sec))
		require.NoError(t, f.db.Set(key, v1, pebble.NoSync))

		var it command.Item
		require.NoError(t, decodeItem(v1, &it))
		require.Equal(t, tc.want, it.ExpiresAt, "version 1 expiry %d s", tc.sec)
	}
	require.NoError(t, f.Close())
	f = openTest(t, dir)
	defer f.Close()
	for i, tc := range cases {
		_, ok, err := f.Get(fmt.Appendf(nil, "k%d", i), t0)
		require.NoError(t, err)
		require.Equal(t, tc.visible, ok, "version 1 expiry %d s read at %d ns", tc.sec, t0)
	}
}
