package fsm

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

func openWitness(t *testing.T, dir string) *FSM {
	t.Helper()
	f, err := Open(dir, discardLogger(), Options{Witness: true, ItemCacheBytes: -1})
	require.NoError(t, err)
	return f
}

// A witness applies what says who the members are and which rules apply,
// and passes over everything else, advancing its applied index all the
// same: its log is compacted like a data member's.
func TestWitnessAppliesMembersNotItems(t *testing.T) {
	w := openWitness(t, t.TempDir())
	defer w.Close()
	next := setKeys(t, w, 1, 0, 50, "v")
	attrs, err := command.Encode(nil, &command.Command{Op: command.OpMember, ReqID: 7, Member: command.MemberAttrs{ID: 1, Name: "n1", HTTPAddr: "h1:80"}})
	require.NoError(t, err)
	raise, err := command.Encode(nil, &command.Command{Op: command.OpClusterVersion, ClusterVersion: command.ClusterVersionWitness})
	require.NoError(t, err)
	res, err := w.Apply([]Entry{
		{Index: next, Data: attrs},
		{Index: next + 1, Data: raise},
		{Index: next + 2, Member: &MemberChange{ID: 3, Name: "w", PeerAddr: "h3:90", Witness: true}},
	})
	require.NoError(t, err)
	require.Equal(t, uint64(7), res[0].ReqID, "the member's own publication is answered")
	require.Equal(t, next+2, w.AppliedIndex())
	require.Zero(t, w.Stats().Items)
	_, ok, err := w.Get([]byte("key-1"), t0)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, command.ClusterVersionWitness, w.ClusterVersion())
	ms := w.Members()
	require.Len(t, ms, 2)
	require.Equal(t, Member{ID: 3, Name: "w", PeerAddr: "h3:90", Witness: true}, ms[1])
}

// A witness is sent a snapshot of the metadata alone: it installs as any
// snapshot, carries the member table, and none of the items.
func TestCheckpointMembersInstallsOnAWitness(t *testing.T) {
	root := t.TempDir()
	leader := openTest(t, filepath.Join(root, "leader", "state"))
	defer leader.Close()
	next := setKeys(t, leader, 1, 0, 2000, "v")
	_, err := leader.Apply([]Entry{{Index: next, Member: &MemberChange{ID: 3, Name: "w", PeerAddr: "h3:90", Witness: true}}})
	require.NoError(t, err)

	ck := filepath.Join(root, "witness", "snap-incoming", "1")
	applied, err := leader.CheckpointMembers(ck)
	require.NoError(t, err)
	require.Equal(t, next, applied)
	full := filepath.Join(root, "full")
	_, err = leader.Checkpoint(full)
	require.NoError(t, err)
	require.Less(t, dirSize(t, ck)*4, dirSize(t, full), "a witness's snapshot holds no items")

	w := openWitness(t, filepath.Join(root, "witness", "witness"))
	defer func() { require.NoError(t, w.Close()) }()
	require.NoError(t, w.InstallSnapshot(ck, applied))
	require.Equal(t, applied, w.AppliedIndex())
	require.Zero(t, w.Stats().Items)
	require.Equal(t, leader.Members(), w.Members())

	// The same copy is refused by a data member: it holds no items.
	ck2 := filepath.Join(root, "data", "snap-incoming", "1")
	_, err = leader.CheckpointMembers(ck2)
	require.NoError(t, err)
	d := openTest(t, filepath.Join(root, "data", "state"))
	defer func() { require.NoError(t, d.Close()) }()
	require.ErrorContains(t, d.InstallSnapshot(ck2, applied), "made for a witness")
}

// A full snapshot (from a leader that did not know the receiver for a
// witness) is stripped of its items as it is installed.
func TestWitnessStripsAFullSnapshot(t *testing.T) {
	root := t.TempDir()
	leader := openTest(t, filepath.Join(root, "leader", "state"))
	defer leader.Close()
	next := setKeys(t, leader, 1, 0, 500, "v")
	ck := filepath.Join(root, "witness", "snap-incoming", "1")
	applied, err := leader.Checkpoint(ck)
	require.NoError(t, err)
	require.Equal(t, next-1, applied)

	w := openWitness(t, filepath.Join(root, "witness", "witness"))
	defer func() { require.NoError(t, w.Close()) }()
	require.NoError(t, w.InstallSnapshot(ck, applied))
	require.Equal(t, applied, w.AppliedIndex())
	require.Zero(t, w.Stats().Items)
	for i := range 500 {
		_, ok, err := w.Get([]byte(fmt.Sprintf("key-%d", i)), t0)
		require.NoError(t, err)
		require.False(t, ok, "key-%d", i)
	}
}

func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	}))
	return n
}
