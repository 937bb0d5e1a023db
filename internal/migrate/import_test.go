package migrate_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/migrate"
	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// checkCopied compares what kvd holds with what was loaded into the
// source at loaded: every item whose TTL cannot have run out is there
// with its value, flags and remaining TTL (no more than the source had
// left, and not much less); items with a short TTL are there the
// same way or absent. It returns how many were absent.
func checkCopied(t *testing.T, kvdAddr string, items map[string]want) (absent int) {
	t.Helper()
	held := readAll(t, kvdAddr, keysOf(items))
	now := time.Now()
	for k, w := range items {
		g := held[k]
		if !g.found {
			require.True(t, w.ttl != 0 && w.ttl < 60, "%s (ttl %d) is missing from kvd", k, w.ttl)
			absent++
			continue
		}
		require.Equal(t, w.value, g.value, "%s: value", k)
		require.Equal(t, w.flags, g.flags, "%s: flags", k)
		if w.ttl == 0 {
			require.Equal(t, int64(-1), g.ttl, "%s never expires", k)
			continue
		}
		left := int64(w.expires.Sub(now) / time.Second)
		// The import copies what memcached's t says is left, and
		// memcached's clock is a counter its timer bumps once a second,
		// which lags on a loaded machine (as this test loads it): five
		// seconds of slack above what the test's own clock says.
		require.LessOrEqual(t, g.ttl, left+5, "%s: TTL %d in kvd, %d left in the source", k, g.ttl, left)
		if w.ttl >= 60 {
			require.GreaterOrEqual(t, g.ttl, left-30, "%s: TTL %d in kvd, %d left in the source", k, g.ttl, left)
		}
		require.GreaterOrEqual(t, g.ttl, int64(0), "%s", k)
	}
	return absent
}

func requireCountsAddUp(t *testing.T, s migrate.Summary) {
	t.Helper()
	require.Equal(t, s.Listed, s.Copied+s.Expired+s.Missing+s.Failed, "%+v", s)
}

// TestImportFromMemcached copies 100k items of mixed sizes, flags and
// TTLs from a real memcached into a real kvd, and checks them in kvd.
func TestImportFromMemcached(t *testing.T) {
	if testing.Short() {
		t.Skip("100k items through a replicated kvd: not in -short")
	}
	mc := startMemcached(t, "-m", "512")
	items := dataset(1, 100_000, 0.05)
	load(t, mc.Addr, items)
	kvd := kvdproc.Start(t, t.TempDir())
	sum, err := migrate.Import(context.Background(), migrate.Options{
		Source: &migrate.MemcachedSource{Addr: mc.Addr}, To: kvd.MemcacheAddr, Verify: true})
	require.NoError(t, err)
	require.NoError(t, sum.Err())
	t.Logf("%d items, %.1f MB in %.2fs: %.0f items/s, %.1f MB/s; verify %.2fs", sum.Copied, float64(sum.Bytes)/1e6, sum.Seconds, sum.ItemsPerSecond, sum.MBPerSecond, sum.VerifySeconds)
	require.True(t, sum.Complete)
	requireCountsAddUp(t, sum)
	require.Zero(t, sum.Failed)
	require.Zero(t, sum.Missing, "nothing deleted the source's items")
	require.Zero(t, sum.Mismatches, "%v", sum.MismatchKeys)
	require.True(t, sum.Verified)
	require.Equal(t, sum.Copied, sum.VerifyChecked)
	// Only short-TTL items can be missing from the listing (they expired
	// before the crawler reached them) or expire in the import.
	require.LessOrEqual(t, sum.Listed, uint64(len(items)))
	absent := checkCopied(t, kvd.MemcacheAddr, items)
	require.GreaterOrEqual(t, uint64(absent), sum.Expired+uint64(len(items))-sum.Listed)
	var bytes uint64
	present := readAll(t, kvd.MemcacheAddr, keysOf(items))
	for k, g := range present {
		if g.found {
			bytes += uint64(len(items[k].value))
		}
	}
	require.LessOrEqual(t, bytes, sum.Bytes, "the summary's bytes are the values copied")
}

// gatedSource holds every fetch until before has run once: a test's way
// to change the source between listing and reading.
type gatedSource struct {
	migrate.Source
	before func()
	ran    chan struct{}
}

func (g *gatedSource) Open(ctx context.Context) (migrate.Fetcher, error) {
	f, err := g.Source.Open(ctx)
	return &gatedFetcher{Fetcher: f, g: g}, err
}

type gatedFetcher struct {
	migrate.Fetcher
	g *gatedSource
}

func (f *gatedFetcher) Fetch(ctx context.Context, b []migrate.Entry) ([]migrate.Fetched, error) {
	select {
	case <-f.g.ran:
	default:
		// The first fetch of any worker runs before; the others wait for it.
		f.g.before()
	}
	return f.Fetcher.Fetch(ctx, b)
}

// TestImportCountsExpiredAndDeletedMeanwhile: an item listed whose TTL
// runs out before it is read is counted expired, one deleted meanwhile is
// counted missing, and neither is written to kvd.
func TestImportCountsExpiredAndDeletedMeanwhile(t *testing.T) {
	mc := startMemcached(t)
	items := map[string]want{}
	for i := range 300 {
		w := want{value: []byte(fmt.Sprintf("value %d", i)), flags: uint32(i)}
		if i%3 == 0 {
			w.ttl = 3
		}
		items[fmt.Sprintf("k%03d", i)] = w
	}
	kvd := kvdproc.Start(t, t.TempDir())
	load(t, mc.Addr, items)
	g := &gatedSource{Source: &migrate.MemcachedSource{Addr: mc.Addr}, ran: make(chan struct{})}
	g.before = func() {
		// Single worker, so this runs once, listing done or not: wait out
		// the short TTLs (memcached's clock has whole seconds), and delete
		// ten items that never expire.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		deleteKeys(t, mc.Addr, "k001", "k002", "k004", "k005", "k007", "k008", "k010", "k011", "k013", "k014")
		close(g.ran)
	}
	// One batch holds the whole listing, so the listing is done when the
	// gate opens (memcached's crawler skips items already expired).
	sum, err := migrate.Import(context.Background(), migrate.Options{Source: g, To: kvd.MemcacheAddr, Workers: 1, BatchItems: 1000, Verify: true})
	require.NoError(t, err)
	require.NoError(t, sum.Err())
	require.Equal(t, migrate.Summary{Source: g.Name(), Target: kvd.MemcacheAddr, Complete: true, Listed: 300, Copied: 190,
		Expired: 100, Missing: 10, Bytes: sum.Bytes, Seconds: sum.Seconds, ItemsPerSecond: sum.ItemsPerSecond, MBPerSecond: sum.MBPerSecond,
		Verified: true, VerifyChecked: 190, VerifySeconds: sum.VerifySeconds}, sum)
	held := readAll(t, kvd.MemcacheAddr, keysOf(items))
	for k, w := range items {
		if w.ttl != 0 || k <= "k014" && k != "k003" && k != "k006" && k != "k009" && k != "k012" && k != "k000" {
			require.False(t, held[k].found, "%s was not to be copied", k)
		} else {
			require.Equal(t, w.value, held[k].value, k)
		}
	}
}

func deleteKeys(t *testing.T, addr string, keys ...string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	for _, k := range keys {
		_, err := fmt.Fprintf(c, "delete %s\r\n", k)
		require.NoError(t, err)
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "DELETED\r\n", line)
	}
}

// killingSource kills the memcached it reads from once n batches were
// fetched: the source dying midway.
type killingSource struct {
	migrate.Source
	mc      *memcachedProc
	after   int
	fetched atomic.Int32
}

func (k *killingSource) Open(ctx context.Context) (migrate.Fetcher, error) {
	f, err := k.Source.Open(ctx)
	return &killingFetcher{Fetcher: f, k: k}, err
}

type killingFetcher struct {
	migrate.Fetcher
	k *killingSource
}

func (f *killingFetcher) Fetch(ctx context.Context, b []migrate.Entry) ([]migrate.Fetched, error) {
	if int(f.k.fetched.Add(1)) > f.k.after {
		f.k.mc.Kill()
	}
	return f.Fetcher.Fetch(ctx, b)
}

// TestImportSourceDiesMidway: the import stops with an error naming the
// source, and the summary says what was copied before.
func TestImportSourceDiesMidway(t *testing.T) {
	mc := startMemcached(t)
	items := dataset(2, 5000, 0)
	load(t, mc.Addr, items)
	kvd := kvdproc.Start(t, t.TempDir())
	src := &killingSource{Source: &migrate.MemcachedSource{Addr: mc.Addr}, mc: mc, after: 10}
	sum, err := migrate.Import(context.Background(), migrate.Options{Source: src, To: kvd.MemcacheAddr, Workers: 2, BatchItems: 50, Verify: true})
	require.Error(t, err)
	require.ErrorContains(t, err, "source memcached "+mc.Addr)
	require.False(t, sum.Complete)
	require.NotEmpty(t, sum.Error)
	require.False(t, sum.Verified)
	require.Positive(t, sum.Copied, "%+v", sum)
	require.Less(t, sum.Copied, uint64(len(items)))
	// What the summary counts as copied is in kvd.
	held := readAll(t, kvd.MemcacheAddr, keysOf(items))
	var n uint64
	for k, g := range held {
		if g.found {
			require.Equal(t, items[k].value, g.value)
			n++
		}
	}
	require.Equal(t, sum.Copied, n)
}
