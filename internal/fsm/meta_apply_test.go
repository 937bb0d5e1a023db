package fsm

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// storedVersion is the item version under key in f's Pebble store.
func storedVersion(t *testing.T, f *FSM, key string) byte {
	t.Helper()
	v, closer, err := f.db.Get(dataKey(nil, []byte(key)))
	require.NoError(t, err)
	defer closer.Close()
	return v[0]
}

func getItem(t *testing.T, f *FSM, key string) command.Item {
	t.Helper()
	it, ok, err := f.Get([]byte(key), t0)
	require.NoError(t, err)
	require.True(t, ok, "%s is missing", key)
	return it
}

// TestMetaStateSurvivesSnapshotAndReopen: the meta writes' item state,
// applied through Apply, is stored in version 3 (and only there), read
// back by Get, shipped by a checkpoint, installed by a follower whose
// digest then matches, and kept across a reopen; a plain write puts the
// item back in version 2.
func TestMetaStateSurvivesSnapshotAndReopen(t *testing.T) {
	root := t.TempDir()
	leader := openTest(t, filepath.Join(root, "leader", "state"))
	defer leader.Close()
	a := &applier{t: t, f: leader}
	for _, k := range []string{"stale", "read", "accessed", "plain"} {
		a.do(set(command.OpSet, k, "v-"+k))
	}
	require.Equal(t, command.StatusDeleted,
		a.do(command.Command{Op: command.OpMetaDelete, Key: []byte("stale"), Meta: command.MetaInvalidate | command.MetaHasTTL, Exptime: 600}).Status)
	res := a.do(command.Command{Op: command.OpMetaGet, Key: []byte("read"), Meta: command.MetaHasTTL | command.MetaWantValue, Exptime: 300})
	require.Equal(t, command.StatusHit, res.Status)
	require.Equal(t, "v-read", string(res.Item.Value))
	require.False(t, res.Item.Fetched)
	require.Equal(t, command.StatusOK, a.do(command.Command{Op: command.OpAccess, Stamp: t0 + 7,
		Accessed: []command.KeyCAS{{Key: []byte("accessed"), CAS: 3, StoredAt: t0}}}).Status)
	res = a.do(command.Command{Op: command.OpMetaGet, Key: []byte("vivified"), Meta: command.MetaVivify, Vivify: 30})
	require.True(t, res.Created && res.Won)

	want := map[string]command.Item{
		"stale":    {ExpiresAt: t0 + 600e9, CAS: 5, StoredAt: t0, Value: []byte("v-stale"), Stale: true},
		"read":     {ExpiresAt: t0 + 300e9, CAS: 2, StoredAt: t0, Value: []byte("v-read"), Fetched: true, AccessedAt: t0},
		"accessed": {CAS: 3, StoredAt: t0, Value: []byte("v-accessed"), Fetched: true, AccessedAt: t0 + 7},
		"plain":    {CAS: 4, StoredAt: t0, Value: []byte("v-plain")},
		"vivified": {ExpiresAt: t0 + 30e9, CAS: 8, StoredAt: t0, Value: []byte{}, TokenSent: true, Fetched: true, AccessedAt: t0},
	}
	check := func(f *FSM, when string) {
		t.Helper()
		for k, it := range want {
			got := getItem(t, f, k)
			if len(it.Value) == 0 {
				it.Value, got.Value = nil, nil
			}
			require.Equal(t, it, got, "%s: %s", when, k)
			wantVersion := byte(itemVersionMeta)
			if k == "plain" {
				wantVersion = itemVersion
			}
			require.Equal(t, wantVersion, storedVersion(t, f, k), "%s: %s", when, k)
		}
	}
	check(leader, "leader")

	ck := filepath.Join(root, "follower", "snap-incoming", "1")
	applied, err := leader.Checkpoint(ck)
	require.NoError(t, err)
	fdir := filepath.Join(root, "follower", "state")
	follower := openTest(t, fdir)
	require.NoError(t, follower.InstallSnapshot(ck, applied))
	check(follower, "installed")
	ld, err := leader.Digest()
	require.NoError(t, err)
	fd, err := follower.Digest()
	require.NoError(t, err)
	require.Equal(t, ld, fd)

	require.NoError(t, follower.Close())
	follower = openTest(t, fdir)
	defer follower.Close()
	check(follower, "reopened")

	// gat keeps the item's meta state; a set stores a fresh item, in
	// version 2 again.
	res = a.do(command.Command{Op: command.OpGAT, Key: []byte("stale"), Exptime: 100})
	require.True(t, res.Item.Stale)
	require.True(t, getItem(t, leader, "stale").Stale)
	a.do(set(command.OpSet, "stale", "again"))
	require.Equal(t, command.Item{CAS: a.index, StoredAt: t0, Value: []byte("again")}, getItem(t, leader, "stale"))
	require.Equal(t, byte(itemVersion), storedVersion(t, leader, "stale"))
}

// TestAccessThroughApply: OpAccess marks each listed item whose CAS is
// still the one read, leaves the others, and changes no counter; within
// one batch, a write before it changes what it sees.
func TestAccessThroughApply(t *testing.T) {
	f := openTest(t, t.TempDir())
	defer f.Close()
	a := &applier{t: t, f: f}
	a.do(set(command.OpSet, "a", "1"))                                                            // CAS 1
	a.do(set(command.OpSet, "b", "2"))                                                            // CAS 2
	a.do(command.Command{Op: command.OpSet, Key: []byte("gone"), Value: []byte("3"), Exptime: 1}) // CAS 3
	before := f.Stats()

	later := t0 + 2e9
	a.do(command.Command{Op: command.OpAccess, Stamp: later, Accessed: []command.KeyCAS{
		{Key: []byte("a"), CAS: 1, StoredAt: t0}, {Key: []byte("b"), CAS: 1, StoredAt: t0}, {Key: []byte("gone"), CAS: 3, StoredAt: t0}, {Key: []byte("missing"), CAS: 9, StoredAt: t0},
	}})
	after := f.Stats()
	require.Equal(t, before.Items, after.Items)
	require.Equal(t, before.Bytes, after.Bytes)
	it := getItem(t, f, "a")
	require.True(t, it.Fetched)
	require.Equal(t, later, it.AccessedAt)
	require.Equal(t, uint64(1), it.CAS, "an access is no write")
	require.False(t, getItem(t, f, "b").Fetched, "b changed since it was read")
	require.Equal(t, byte(itemVersion), storedVersion(t, f, "b"))
	require.Equal(t, byte(itemVersion), storedVersion(t, f, "gone"), "an expired item is not marked")

	// One batch: a set of a, then an access naming the CAS a had before.
	res, err := f.Apply([]Entry{a.entry(set(command.OpSet, "a", "new")), a.entry(command.Command{Op: command.OpAccess,
		Accessed: []command.KeyCAS{{Key: []byte("a"), CAS: 1, StoredAt: t0}, {Key: []byte("b"), CAS: 2, StoredAt: t0}, {Key: []byte("b"), CAS: 2, StoredAt: t0}}})})
	require.NoError(t, err)
	require.Equal(t, command.StatusOK, res[1].Status)
	require.False(t, getItem(t, f, "a").Fetched)
	require.True(t, getItem(t, f, "b").Fetched)
}
