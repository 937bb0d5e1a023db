package compat

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	qtmemcache "github.com/QuangTung97/go-memcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// The meta protocol's client, written by others: github.com/QuangTung97/
// go-memcache (its memcache package: mg with N, c and v; ms with C and T;
// md with C, I and T; flush_all, pipelined): of the client libraries the
// Go module proxy and Debian serve, the one found that speaks meta
// (Debian's Dalli 3.0.6, pymemcache 3.5.2 and libmemcached 1.1.4, under
// pylibmc and PHP's memcached, speak text or binary only). It has no ma, so
// incr and decr through meta are the differential table's alone.

// metaClientCall waits for one of the client's pipelined results. The
// deadline only turns a server that never answers into a failure.
func metaClientCall[T any](t *testing.T, what string, fn func() (T, error)) T {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err, what)
		return r.v
	case <-time.After(replyDeadline):
		t.Fatalf("%s: no answer in %s", what, replyDeadline)
		panic("unreachable")
	}
}

// runMetaClient drives get, set, delete, cas, a lease (mg N) and
// stale-while-revalidate (md I, then X W / X Z) through the client against
// the server at addr, and a pipelined batch.
func runMetaClient(t *testing.T, addr string) {
	c, err := qtmemcache.New(addr, 1)
	require.NoError(t, err)
	defer c.Close()
	p := c.Pipeline()
	defer p.Finish()
	prefix := fmt.Sprintf("qt%d_", time.Now().UnixNano())
	k1, k2 := prefix+"k1", prefix+"k2"
	get := func(key string, opts qtmemcache.MGetOptions) qtmemcache.MGetResponse {
		t.Helper()
		return metaClientCall(t, "mg "+key, p.MGet(key, opts))
	}
	set := func(key, value string, opts qtmemcache.MSetOptions) qtmemcache.MSetResponseType {
		t.Helper()
		return metaClientCall(t, "ms "+key, p.MSet(key, []byte(value), opts)).Type
	}
	del := func(key string, opts qtmemcache.MDelOptions) qtmemcache.MDelResponseType {
		t.Helper()
		return metaClientCall(t, "md "+key, p.MDel(key, opts)).Type
	}

	// get, set, cas, delete.
	require.Equal(t, qtmemcache.MGetResponseTypeEN, get(k1, qtmemcache.MGetOptions{}).Type, "a miss")
	require.Equal(t, qtmemcache.MSetResponseTypeHD, set(k1, "hello", qtmemcache.MSetOptions{TTL: 1000}))
	r := get(k1, qtmemcache.MGetOptions{CAS: true})
	require.Equal(t, qtmemcache.MGetResponseTypeVA, r.Type)
	require.Equal(t, "hello", string(r.Data))
	require.NotZero(t, r.CAS)
	require.Zero(t, r.Flags, "no W, X or Z on a plain item")
	require.Equal(t, qtmemcache.MSetResponseTypeHD, set(k1, "world", qtmemcache.MSetOptions{CAS: r.CAS}), "cas that matches")
	require.Equal(t, qtmemcache.MSetResponseTypeEX, set(k1, "stale", qtmemcache.MSetOptions{CAS: r.CAS}), "cas that no longer matches")
	require.Equal(t, qtmemcache.MSetResponseTypeNF, set(prefix+"none", "x", qtmemcache.MSetOptions{CAS: r.CAS}), "cas on a miss")
	r = get(k1, qtmemcache.MGetOptions{CAS: true})
	require.Equal(t, "world", string(r.Data))
	require.Equal(t, qtmemcache.MDelResponseTypeEX, del(k1, qtmemcache.MDelOptions{CAS: r.CAS + 1}), "delete with a wrong cas")
	require.Equal(t, qtmemcache.MDelResponseTypeHD, del(k1, qtmemcache.MDelOptions{CAS: r.CAS}))
	require.Equal(t, qtmemcache.MDelResponseTypeNF, del(k1, qtmemcache.MDelOptions{}))
	require.Equal(t, qtmemcache.MGetResponseTypeEN, get(k1, qtmemcache.MGetOptions{}).Type)

	// A lease: the first mg N of a miss creates an empty item and wins
	// (W), the next sees the token taken (Z); the winner fills it with
	// its CAS.
	lease := get(k2, qtmemcache.MGetOptions{N: 30, CAS: true})
	require.Equal(t, qtmemcache.MGetResponseTypeVA, lease.Type)
	require.Empty(t, lease.Data)
	require.Equal(t, qtmemcache.MGetFlagW, lease.Flags, "the first mg N wins")
	require.NotZero(t, lease.CAS)
	r = get(k2, qtmemcache.MGetOptions{N: 30})
	require.Equal(t, qtmemcache.MGetFlagZ, r.Flags, "the next sees the token sent")
	require.Equal(t, qtmemcache.MSetResponseTypeHD, set(k2, "filled", qtmemcache.MSetOptions{CAS: lease.CAS, TTL: 1000}))
	r = get(k2, qtmemcache.MGetOptions{N: 30})
	require.Equal(t, "filled", string(r.Data))
	require.Zero(t, r.Flags)

	// Stale-while-revalidate: md I marks the item stale; the first reader
	// gets the stale value and the win (X W), the others the stale value
	// and Z; the winner's ms with its CAS makes it fresh.
	require.Equal(t, qtmemcache.MDelResponseTypeHD, del(k2, qtmemcache.MDelOptions{I: true, TTL: 30}))
	win := get(k2, qtmemcache.MGetOptions{CAS: true})
	require.Equal(t, "filled", string(win.Data))
	require.Equal(t, qtmemcache.MGetFlagX|qtmemcache.MGetFlagW, win.Flags)
	r = get(k2, qtmemcache.MGetOptions{})
	require.Equal(t, "filled", string(r.Data))
	require.Equal(t, qtmemcache.MGetFlagX|qtmemcache.MGetFlagZ, r.Flags)
	require.Equal(t, qtmemcache.MSetResponseTypeHD, set(k2, "fresh", qtmemcache.MSetOptions{CAS: win.CAS, TTL: 1000}))
	r = get(k2, qtmemcache.MGetOptions{})
	require.Equal(t, "fresh", string(r.Data))
	require.Zero(t, r.Flags)

	// A pipelined batch: ten sets and ten gets, answered in order.
	const n = 10
	sets := make([]func() (qtmemcache.MSetResponse, error), n)
	gets := make([]func() (qtmemcache.MGetResponse, error), n)
	for i := range n {
		sets[i] = p.MSet(prefix+"p"+strconv.Itoa(i), []byte("v"+strconv.Itoa(i)), qtmemcache.MSetOptions{})
	}
	for i := range n {
		gets[i] = p.MGet(prefix+"p"+strconv.Itoa(i), qtmemcache.MGetOptions{})
	}
	for i := range n {
		require.Equal(t, qtmemcache.MSetResponseTypeHD, metaClientCall(t, "batch ms", sets[i]).Type)
	}
	for i := range n {
		require.Equal(t, "v"+strconv.Itoa(i), string(metaClientCall(t, "batch mg", gets[i]).Data))
	}

	// flush_all empties the server.
	metaClientCall(t, "flush_all", func() (struct{}, error) { return struct{}{}, p.FlushAll()() })
	require.Equal(t, qtmemcache.MGetResponseTypeEN, get(k2, qtmemcache.MGetOptions{}).Type)
}

// TestMetaClientAgainstMemcached keeps the checks honest: they hold against
// memcached 1.6.18.
func TestMetaClientAgainstMemcached(t *testing.T) {
	needMemcached(t)
	runMetaClient(t, startMemcached(t, memcachedBin))
}

// TestMetaClientAgainstKvd runs the meta client against a kvd node.
func TestMetaClientAgainstKvd(t *testing.T) {
	p := kvdproc.Start(t, t.TempDir())
	p.WaitClusterVersion() // the meta commands are gated on it
	runMetaClient(t, p.MemcacheAddr)
}
