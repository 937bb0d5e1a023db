package fsm

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// BenchmarkGetParallel is the read hot path (memcache get on every core); it
// guards the cost of the lock that makes InstallSnapshot safe for readers.
func BenchmarkGetParallel(b *testing.B) {
	f, err := Open(b.TempDir(), discardLogger(), Options{})
	require.NoError(b, err)
	defer f.Close()
	const n = 1000
	ents := make([]Entry, n)
	for i := range ents {
		data, err := command.Encode(nil, &command.Command{Op: command.OpSet, Key: []byte(fmt.Sprintf("key-%d", i)), Value: []byte("value"), Stamp: t0})
		require.NoError(b, err)
		ents[i] = Entry{Index: uint64(i + 1), Data: data}
	}
	_, err = f.Apply(ents)
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var kb []byte
		i := 0
		for pb.Next() {
			kb = fmt.Appendf(kb[:0], "key-%d", i%n)
			if _, ok, err := f.Get(kb, t0); err != nil || !ok {
				b.Fatalf("get %s: %v %v", kb, ok, err)
			}
			i++
		}
	})
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// setKeys applies sets of key-<from>..key-<to-1> with value v<i>, one entry
// each, starting at index next; it returns the next index.
func setKeys(t testing.TB, f *FSM, next uint64, from, to int, gen string) uint64 {
	t.Helper()
	var ents []Entry
	for i := from; i < to; i++ {
		data, err := command.Encode(nil, &command.Command{Op: command.OpSet, Key: []byte(fmt.Sprintf("key-%d", i)),
			Value: []byte(fmt.Sprintf("%s-%d", gen, i)), Stamp: t0})
		require.NoError(t, err)
		ents = append(ents, Entry{Index: next, Data: data})
		next++
	}
	_, err := f.Apply(ents)
	require.NoError(t, err)
	return next
}

// TestCheckpointInstallRoundTrip ships a leader's state to a follower with
// older state while readers hammer the follower: every read either sees the
// old or the new value of a key, never an error, and afterwards the
// follower holds exactly the leader's state, applied index included.
func TestCheckpointInstallRoundTrip(t *testing.T) {
	root := t.TempDir()
	leader := openTest(t, filepath.Join(root, "leader", "state"))
	defer leader.Close()
	next := setKeys(t, leader, 1, 0, 500, "new")
	next = setKeys(t, leader, next, 500, 600, "new")
	ck := filepath.Join(root, "follower", "snap-incoming", "1")
	applied, err := leader.Checkpoint(ck)
	require.NoError(t, err)
	require.Equal(t, next-1, applied)

	fdir := filepath.Join(root, "follower", "state")
	follower := openTest(t, fdir)
	defer func() { require.NoError(t, follower.Close()) }()
	setKeys(t, follower, 1, 0, 300, "old")

	rs := startReaders(4, func(r int) func() error {
		i := r
		return func() error {
			i = (i + 7) % 600
			it, ok, err := follower.Get([]byte(fmt.Sprintf("key-%d", i)), t0)
			if err != nil {
				return err
			}
			if ok && string(it.Value) != fmt.Sprintf("old-%d", i) && string(it.Value) != fmt.Sprintf("new-%d", i) {
				return fmt.Errorf("key-%d = %q", i, it.Value)
			}
			_ = follower.Stats()
			_, err = follower.Scan([]byte("key-1"), nil, 5, t0)
			return err
		}
	})
	rs.await(1000)
	require.NoError(t, follower.InstallSnapshot(ck, applied))
	rs.await(1000)
	rs.finish(t)

	require.Equal(t, leader.Stats().Items, follower.Stats().Items)
	require.Equal(t, applied, follower.AppliedIndex())
	for i := range 600 {
		it, ok, err := follower.Get([]byte(fmt.Sprintf("key-%d", i)), t0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, fmt.Sprintf("new-%d", i), string(it.Value))
	}
	_, err = os.Stat(ck)
	require.True(t, os.IsNotExist(err), "the received dir is consumed")
	_, err = os.Stat(fdir + replacedSuffix)
	require.True(t, os.IsNotExist(err), "the replaced state is removed")

	// Redelivered entries at or below the installed index are skipped; the
	// next one applies.
	res, err := follower.Apply([]Entry{{Index: 5}, {Index: applied + 1}})
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.Equal(t, applied+1, follower.AppliedIndex())

	// It survives a reopen.
	require.NoError(t, follower.Close())
	follower = openTest(t, fdir)
	require.Equal(t, applied+1, follower.AppliedIndex())
	require.Equal(t, int64(600), follower.Stats().Items)
}

func TestInstallRefusesAStateThatDoesNotOpen(t *testing.T) {
	root := t.TempDir()
	f := openTest(t, filepath.Join(root, "state"))
	defer f.Close()
	setKeys(t, f, 1, 0, 10, "mine")
	bad := filepath.Join(root, "snap-incoming", "x")
	require.NoError(t, os.MkdirAll(bad, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(bad, "CURRENT"), []byte("MANIFEST-999999\n"), 0o600))
	require.Error(t, f.InstallSnapshot(bad, 1))
	// An empty directory opens as an empty store: behind any snapshot.
	empty := filepath.Join(root, "snap-incoming", "empty")
	require.NoError(t, os.MkdirAll(empty, 0o750))
	require.Error(t, f.InstallSnapshot(empty, 1))
	it, ok, err := f.Get([]byte("key-3"), t0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "mine-3", string(it.Value))
	require.Equal(t, uint64(10), f.AppliedIndex())
}

// TestOpenRecoversAnInterruptedInstall plays the two crash points of the
// swap: between the renames (no state, a replaced one: put it back) and
// after them (both: drop the replaced one).
func TestOpenRecoversAnInterruptedInstall(t *testing.T) {
	t.Run("between renames", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		f := openTest(t, dir)
		setKeys(t, f, 1, 0, 5, "old")
		require.NoError(t, f.Close())
		require.NoError(t, os.Rename(dir, dir+replacedSuffix))
		f = openTest(t, dir)
		defer f.Close()
		require.Equal(t, uint64(5), f.AppliedIndex())
		_, err := os.Stat(dir + replacedSuffix)
		require.True(t, os.IsNotExist(err))
	})
	t.Run("after renames", func(t *testing.T) {
		root := t.TempDir()
		dir := filepath.Join(root, "state")
		old := openTest(t, dir)
		setKeys(t, old, 1, 0, 5, "old")
		require.NoError(t, old.Close())
		received := filepath.Join(root, "received")
		nw := openTest(t, received)
		setKeys(t, nw, 1, 0, 9, "new")
		require.NoError(t, nw.Close())
		require.NoError(t, os.Rename(dir, dir+replacedSuffix))
		require.NoError(t, os.Rename(received, dir))
		f := openTest(t, dir)
		defer f.Close()
		require.Equal(t, uint64(9), f.AppliedIndex())
		_, err := os.Stat(dir + replacedSuffix)
		require.True(t, os.IsNotExist(err))
	})
}

// Values kept in blob files (blobMinSize and up) travel in the checkpoint:
// its files are flat and regular, which is what the transport streams, and
// the follower reads every value back.
func TestCheckpointCarriesBlobFiles(t *testing.T) {
	root := t.TempDir()
	leader := openTest(t, filepath.Join(root, "leader", "state"))
	defer leader.Close()
	big := strings.Repeat("b", 2*blobMinSize)
	next := setKeys(t, leader, 1, 0, 50, big)
	require.NoError(t, leader.db.Flush()) // blob files are written by flushes
	setKeys(t, leader, next, 50, 60, big)
	ck := filepath.Join(root, "follower", "snap-incoming", "1")
	applied, err := leader.Checkpoint(ck)
	require.NoError(t, err)

	ents, err := os.ReadDir(ck)
	require.NoError(t, err)
	blobs := 0
	for _, e := range ents {
		require.True(t, e.Type().IsRegular(), "checkpoint holds %s, not a regular file", e.Name())
		if strings.HasSuffix(e.Name(), ".blob") {
			blobs++
		}
	}
	require.NotZero(t, blobs, "no blob file in the checkpoint: values were not separated")

	follower := openTest(t, filepath.Join(root, "follower", "state"))
	defer follower.Close()
	require.NoError(t, follower.InstallSnapshot(ck, applied))
	for i := range 60 {
		it, ok, err := follower.Get([]byte(fmt.Sprintf("key-%d", i)), t0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, fmt.Sprintf("%s-%d", big, i), string(it.Value))
	}
}
