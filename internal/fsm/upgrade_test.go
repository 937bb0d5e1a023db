package fsm

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	pebblev1 "github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/v2"
	vfsv1 "github.com/cockroachdb/pebble/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/durable"
)

// rewriteAsV1 copies every key of the (closed) store in src into a new store
// in dst, written by Pebble v1 in its default format: what kvd wrote before
// it moved to Pebble v2.
func rewriteAsV1(t *testing.T, src, dst string) {
	t.Helper()
	from, err := pebble.Open(src, &pebble.Options{Logger: durable.NewPebbleLogger(discardLogger())})
	require.NoError(t, err)
	defer from.Close()
	to, err := pebblev1.Open(dst, &pebblev1.Options{})
	require.NoError(t, err)
	it, err := from.NewIter(nil)
	require.NoError(t, err)
	b := to.NewBatch()
	for it.First(); it.Valid(); it.Next() {
		require.NoError(t, b.Set(it.Key(), it.Value(), nil))
	}
	require.NoError(t, it.Close())
	require.NoError(t, b.Commit(pebblev1.Sync))
	require.NoError(t, to.Close())
	desc, err := pebblev1.Peek(dst, vfsv1.Default)
	require.NoError(t, err)
	require.Equal(t, pebblev1.FormatMostCompatible, desc.FormatMajorVersion, "the copy is in the format old kvd wrote")
	_, err = pebble.Open(dst, &pebble.Options{ReadOnly: true})
	require.Error(t, err, "Pebble v2 alone cannot open the copy, or this test proves nothing")
}

// A state store written by kvd on Pebble v1, and a snapshot sent by such a
// node, open with every item, the applied index and the counts, and take
// writes after.
func TestStateWrittenByPebbleV1StillOpens(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "src")
	f := openTest(t, src)
	next := setKeys(t, f, 1, 0, 300, "v")
	big := strings.Repeat("x", 3*blobMinSize)
	next = setKeys(t, f, next, 300, 310, big)
	want := f.Stats()
	require.NoError(t, f.Close())

	check := func(t *testing.T, g *FSM) {
		require.Equal(t, want.Applied, g.AppliedIndex())
		require.Equal(t, want.Items, g.Stats().Items)
		require.Equal(t, want.Bytes, g.Stats().Bytes)
		for i := range 310 {
			gen := "v"
			if i >= 300 {
				gen = big
			}
			it, ok, err := g.Get([]byte(fmt.Sprintf("key-%d", i)), t0)
			require.NoError(t, err)
			require.True(t, ok, "key-%d", i)
			require.Equal(t, fmt.Sprintf("%s-%d", gen, i), string(it.Value))
		}
	}

	t.Run("in place", func(t *testing.T) {
		old := filepath.Join(root, "old")
		rewriteAsV1(t, src, old)
		g := openTest(t, old)
		check(t, g)
		setKeys(t, g, next, 310, 320, big)
		require.NoError(t, g.Close())
		g = openTest(t, old)
		defer g.Close()
		require.Equal(t, want.Items+10, g.Stats().Items)
	})
	t.Run("as a snapshot", func(t *testing.T) {
		follower := openTest(t, filepath.Join(root, "follower", "state"))
		defer follower.Close()
		ck := filepath.Join(root, "follower", "snap-incoming", "1")
		rewriteAsV1(t, src, ck)
		require.NoError(t, follower.InstallSnapshot(ck, want.Applied))
		check(t, follower)
	})
}
