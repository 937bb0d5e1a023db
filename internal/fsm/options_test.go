package fsm

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

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
		ents = append(ents, setEntry(t, uint64(i+1), fmt.Sprintf("key-%06d", k), value))
	}
	_, err = f.Apply(ents)
	require.NoError(t, err)
	require.NoError(t, f.db.Flush())

	m := f.db.Metrics()
	var tables int64
	var refs uint64
	for _, l := range m.Levels {
		tables += l.TablesCount
		refs += l.EstimatedReferencesSize
	}
	require.Equal(t, int64(1), tables, "one flush of %d values of %d bytes", n, size)
	require.Positive(t, refs, "the values are in blob files, referred to by the table")

	it, ok, err := f.Get([]byte(fmt.Sprintf("key-%06d", n-1)), t0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, value, it.Value)
}

// TestSteadyWritesDoNotRecopyValues: every flush of unique keys adds one
// to the blob reference depth of the tables it is compacted into, and a
// compaction whose output would pass maxBlobDepth copies the values it
// covers into new blob files. At 64, a steady load of 8 KiB sets (a flush
// every 0.2 s) began copying values again after about 15 s, and ran
// slower for it (bench/RESULTS-core.md). Here 120 small flushes of random
// keys, with compactions running between them, must copy nothing; at 64
// the same run copied about half the values again.
func TestSteadyWritesDoNotRecopyValues(t *testing.T) {
	f, err := Open("/state", discardLogger(), Options{FS: vfs.NewMem(), CacheBytes: 1 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()

	const flushes, perFlush, size = 120, 16, 4 << 10
	value := []byte(strings.Repeat("v", size))
	rng := rand.New(rand.NewPCG(3, 4))
	index := uint64(0)
	for range flushes {
		ents := make([]Entry, 0, perFlush)
		for range perFlush {
			index++
			ents = append(ents, setEntry(t, index, fmt.Sprintf("key-%016x", rng.Uint64()), value))
		}
		_, err = f.Apply(ents)
		require.NoError(t, err)
		require.NoError(t, f.db.Flush())
	}
	// The compactions the last flushes started count too.
	m := f.db.Metrics()
	for deadline := time.Now().Add(10 * time.Second); m.Compact.NumInProgress > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		m = f.db.Metrics()
	}
	require.Zero(t, m.Compact.NumInProgress, "compactions still running after 10 s")
	// Pebble counts what flushes write to blob files in BlobBytesCompacted
	// too, so what compactions copied is the difference.
	var flushed, written uint64
	for _, l := range m.Levels {
		flushed += l.BlobBytesFlushed
		written += l.BlobBytesCompacted
	}
	copied := written - flushed
	require.GreaterOrEqual(t, flushed, uint64(flushes*perFlush*size), "every value went to a blob file")
	require.Positive(t, m.Compact.Count, "compactions ran between the flushes")
	require.Zero(t, copied, "no compaction copied values into new blob files")
}

// setEntry is the log entry at index that sets key to value.
func setEntry(t *testing.T, index uint64, key string, value []byte) Entry {
	t.Helper()
	data, err := command.Encode(nil, &command.Command{Op: command.OpSet,
		Key: []byte(key), Value: value, Stamp: t0, MaxSize: 1 << 20})
	require.NoError(t, err)
	return Entry{Index: index, Data: data}
}
