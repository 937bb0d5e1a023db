package fsm

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// TestFlushOfSeparatedValuesMakesOneTable: Pebble sizes an sstable by the
// blob values it refers to as well as by its own bytes, so at its default
// 2 MiB target a flush of 2,000 values of 8 KiB was cut into eight tables
// of about 250 keys each, and every compaction after it juggled files of a
// few kilobytes (bench/RESULTS-core.md). At targetFileSize it makes one
// table, whose keys then refer to one blob file.
func TestFlushOfSeparatedValuesMakesOneTable(t *testing.T) {
	f, err := Open("/state", discardLogger(), Options{FS: vfs.NewMem(), CacheBytes: 1 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()

	const n, size = 2000, 8 << 10
	value := []byte(strings.Repeat("v", size))
	rng := rand.New(rand.NewPCG(1, 2))
	var ents []Entry
	for i, k := range rng.Perm(n) { // keys in random order, as unique-key sets come
		data, err := command.Encode(nil, &command.Command{Op: command.OpSet,
			Key: []byte(fmt.Sprintf("key-%06d", k)), Value: value, Stamp: t0, MaxSize: 1 << 20})
		require.NoError(t, err)
		ents = append(ents, Entry{Index: uint64(i + 1), Data: data})
	}
	_, err = f.Apply(ents)
	require.NoError(t, err)
	require.NoError(t, f.db.Flush())

	m := f.db.Metrics()
	var tables int64
	for _, l := range m.Levels {
		tables += l.TablesCount
	}
	require.Equal(t, int64(1), tables, "one flush of %d values of %d bytes", n, size)
	require.Positive(t, m.Levels[0].EstimatedReferencesSize+m.Levels[6].EstimatedReferencesSize,
		"the values are in blob files, referred to by the table")

	it, ok, err := f.Get([]byte(fmt.Sprintf("key-%06d", n-1)), t0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, value, it.Value)
}
