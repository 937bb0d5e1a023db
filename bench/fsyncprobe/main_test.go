//go:build linux

package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProbeCountsEveryFlush(t *testing.T) {
	r, err := probe(t.TempDir(), 512, 7, 3)
	require.NoError(t, err)
	assert.Equal(t, 3, r.threads)
	assert.Equal(t, 21, r.syncs, "each of 3 threads flushes 7 times")
	assert.Positive(t, r.p50)
	assert.LessOrEqual(t, r.p50, r.p90)
	assert.LessOrEqual(t, r.p90, r.p99)
	assert.LessOrEqual(t, r.p99, r.elapsed, "no flush outlasts the probe")
}

func TestRegionSize(t *testing.T) {
	for _, c := range []struct {
		size, threads int
		want          int64
	}{
		{3000, 1, 3_000_000},
		{3000, 8, 3_000_000},
		{3000, 64, 1_047_000}, // 64 MiB / 64, rounded down to whole writes
		{1 << 20, 64, 1 << 20},
		{1 << 20, 1, 64 << 20},
		{5 << 20, 64, 5 << 20}, // never less than one write
	} {
		assert.Equal(t, c.want, regionSize(c.size, c.threads), "size %d, %d threads", c.size, c.threads)
	}
}

func TestFlushLoopWrapsWithinItsRegion(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "region")
	require.NoError(t, err)
	defer f.Close()
	lat, err := flushLoop(f, make([]byte, 10), 20, 30, 7)
	require.NoError(t, err)
	assert.Len(t, lat, 7)
	st, err := f.Stat()
	require.NoError(t, err)
	assert.EqualValues(t, 50, st.Size(), "seven writes of 10 bytes stay within [20, 50)")
}

func TestRunRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-dir", dir, "-threads", "0"},
		{"-dir", dir, "-threads", "1,x"},
		{"-dir", dir, "-threads", "65"},
		{"-dir", dir, "-size", "0"},
		{"-dir", dir, "-size", "2000000"},
		{"-dir", dir, "-count", "0"},
		{"-dir", dir, "-no-such-flag"},
		{"-dir", dir + "/missing"},
	} {
		assert.Error(t, run(args), "%v", args)
	}
}
