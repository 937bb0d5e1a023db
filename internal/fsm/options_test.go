package fsm

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
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
	// The compactions the last flushes started count too.
	m := writeFlushes(t, f, flushes, perFlush, func(uint64) string { return fmt.Sprintf("key-%016x", rng.Uint64()) }, value)
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

// TestMaxOpenFilesKeepsEveryFileOpen: a store of large values keeps about
// one blob file per flush, and once it holds more files than its file
// cache, random gets reopen files again and again (past Pebble's default
// of 1,000, about 24 GB of 8 KiB values, one get in five opened a file:
// bench/RESULTS-core.md). Options.MaxOpenFiles sets the bound: a store
// of some 150 files, read twice over, opens none again in the second pass
// with room for them all, and keeps reopening them with room for 64.
func TestMaxOpenFilesKeepsEveryFileOpen(t *testing.T) {
	const flushes, perFlush, size = 150, 4, 8 << 10
	value := []byte(strings.Repeat("v", size))
	// compacted reports a compaction during the gets (reads can start one,
	// and a slow machine can still be finishing those the flushes began):
	// it replaces files the passes had opened, and voids the count.
	misses := func(maxOpen int) (files, secondPass int64, compacted bool) {
		// No item cache, so that every get reads the store.
		f, err := Open("/state", discardLogger(), Options{FS: vfs.NewMem(), CacheBytes: 1 << 20, ItemCacheBytes: -1, MaxOpenFiles: maxOpen})
		require.NoError(t, err)
		defer func() { require.NoError(t, f.Close()) }()
		var keys []string
		m := writeFlushes(t, f, flushes, perFlush, func(index uint64) string {
			keys = append(keys, fmt.Sprintf("key-%08d", index))
			return keys[len(keys)-1]
		}, value)
		files = int64(m.BlobFiles.LiveCount)
		for _, l := range m.Levels {
			files += l.TablesCount
		}
		compactions := f.db.Metrics().Compact.Count
		rng := rand.New(rand.NewPCG(5, 6))
		for pass := range 2 {
			if pass == 1 {
				secondPass = -f.db.Metrics().FileCache.Misses
			}
			for _, i := range rng.Perm(len(keys)) {
				it, ok, err := f.Get([]byte(keys[i]), t0)
				require.NoError(t, err)
				require.True(t, ok, keys[i])
				require.Len(t, it.Value, size)
			}
		}
		st := f.Stats()
		require.Equal(t, int64(maxOpen), st.MaxOpenFiles)
		require.Equal(t, f.db.Metrics().FileCache.Misses, st.FileCacheMisses)
		require.Positive(t, st.FileCacheHits)
		if f.db.Metrics().Compact.Count != compactions {
			return files, 0, true
		}
		if maxOpen > int(files) {
			require.Equal(t, files, st.OpenFiles, "every file is open")
		}
		return files, secondPass + st.FileCacheMisses, false
	}
	var files, reopened int64
	for try := 1; ; try++ {
		var compacted bool
		files, reopened, compacted = misses(2000)
		if !compacted {
			break
		}
		require.Less(t, try, 5, "a compaction ran during every try")
		t.Logf("try %d: a compaction ran during the gets; again", try)
	}
	require.Greater(t, files, int64(100), "the store holds more files than a small cache")
	require.Zero(t, reopened, "with room for all %d files", files)
	_, reopened, _ = misses(74) // Pebble keeps 10 of these for files outside its cache
	require.Positive(t, reopened, "with room for 64 of %d files", files)
	t.Logf("%d files; %d reopened in the second pass with room for 64", files, reopened)
}

// writeFlushes applies flushes batches of perFlush sets of value, naming
// each key by key(its log index), and flushes the store after each batch.
// It returns the store's metrics once the compactions those flushes
// started have finished, waiting at most 10 s for them.
func writeFlushes(t *testing.T, f *FSM, flushes, perFlush int, key func(index uint64) string, value []byte) *pebble.Metrics {
	t.Helper()
	index := uint64(0)
	for range flushes {
		ents := make([]Entry, 0, perFlush)
		for range perFlush {
			index++
			ents = append(ents, setEntry(t, index, key(index), value))
		}
		_, err := f.Apply(ents)
		require.NoError(t, err)
		require.NoError(t, f.db.Flush())
	}
	m := f.db.Metrics()
	for deadline := time.Now().Add(10 * time.Second); m.Compact.NumInProgress > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		m = f.db.Metrics()
	}
	require.Zero(t, m.Compact.NumInProgress, "compactions still running after 10 s")
	return m
}

// setEntry is the log entry at index that sets key to value.
func setEntry(t *testing.T, index uint64, key string, value []byte) Entry {
	t.Helper()
	data, err := command.Encode(nil, &command.Command{Op: command.OpSet,
		Key: []byte(key), Value: value, Stamp: t0, MaxSize: 1 << 20})
	require.NoError(t, err)
	return Entry{Index: index, Data: data}
}
