package compat

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// Binary opcodes the exchanges below use (memcached's protocol_binary.h).
const (
	binGet      = 0x00
	binSet      = 0x01
	binAdd      = 0x02
	binReplace  = 0x03
	binDelete   = 0x04
	binIncr     = 0x05
	binDecr     = 0x06
	binQuit     = 0x07
	binFlush    = 0x08
	binGetQ     = 0x09
	binNoop     = 0x0a
	binVersion  = 0x0b
	binGetK     = 0x0c
	binGetKQ    = 0x0d
	binAppend   = 0x0e
	binPrepend  = 0x0f
	binStat     = 0x10
	binSetQ     = 0x11
	binAddQ     = 0x12
	binDeleteQ  = 0x14
	binIncrQ    = 0x15
	binFlushQ   = 0x18
	binVerbose  = 0x1b
	binTouch    = 0x1c
	binGAT      = 0x1d
	binGATQ     = 0x1e
	binSASLList = 0x20
	binGATK     = 0x23
	binGATKQ    = 0x24
)

// binReq is one request packet.
type binReq struct {
	op     byte
	key    string
	extras []byte
	value  string
	cas    uint64
	opaque uint32
}

func (r binReq) bytes() []byte {
	h := make([]byte, 24, 24+len(r.extras)+len(r.key)+len(r.value))
	h[0] = 0x80
	h[1] = r.op
	binary.BigEndian.PutUint16(h[2:], uint16(len(r.key)))
	h[4] = byte(len(r.extras))
	binary.BigEndian.PutUint32(h[8:], uint32(len(r.extras)+len(r.key)+len(r.value)))
	binary.BigEndian.PutUint32(h[12:], r.opaque)
	binary.BigEndian.PutUint64(h[16:], r.cas)
	h = append(h, r.extras...)
	h = append(h, r.key...)
	return append(h, r.value...)
}

// storeExtras are a set/add/replace's flags and expiry.
func storeExtras(flags, exptime uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, flags), exptime)
}

// arithExtras are an incr/decr's delta, initial value and expiry.
func arithExtras(delta, initial uint64, exptime uint32) []byte {
	b := binary.BigEndian.AppendUint64(nil, delta)
	b = binary.BigEndian.AppendUint64(b, initial)
	return binary.BigEndian.AppendUint32(b, exptime)
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// binExchange is a run of requests whose responses are compared; every run
// ends with a Noop, whose response marks the end of what the server says.
type binExchange struct {
	name string
	reqs []binReq
	// closes: the server answers and then closes the connection (so the
	// Noop gets no answer); the next exchange dials again.
	closes bool
}

// binaryExchanges is the table both servers answer. Keys are prefixed per
// run; each exchange starts from what the ones before it left.
func binaryExchanges() []binExchange {
	ex := func(name string, reqs ...binReq) binExchange { return binExchange{name: name, reqs: reqs} }
	closing := func(name string, reqs ...binReq) binExchange {
		return binExchange{name: name, reqs: reqs, closes: true}
	}
	set := func(op byte, key, value string, flags uint32, cas uint64) binReq {
		return binReq{op: op, key: key, extras: storeExtras(flags, 0), value: value, cas: cas}
	}
	return []binExchange{
		ex("set and get", set(binSet, "a", "hello", 5, 0), binReq{op: binGet, key: "a", opaque: 7}),
		ex("getk", binReq{op: binGetK, key: "a", opaque: 8}),
		ex("get miss", binReq{op: binGet, key: "nope", opaque: 9}),
		ex("getk miss", binReq{op: binGetK, key: "nope"}),
		ex("quiet gets drop misses", binReq{op: binGetQ, key: "nope"}, binReq{op: binGetKQ, key: "nope"},
			binReq{op: binGetQ, key: "a", opaque: 1}, binReq{op: binGetKQ, key: "a", opaque: 2}),
		ex("add existing", set(binAdd, "a", "x", 0, 0)),
		ex("add new", set(binAdd, "b", "bee", 0, 0)),
		ex("replace miss", set(binReplace, "nope", "x", 0, 0)),
		ex("replace hit", set(binReplace, "b", "bee2", 3, 0), binReq{op: binGet, key: "b"}),
		ex("append and prepend", binReq{op: binAppend, key: "a", value: " world"}, binReq{op: binPrepend, key: "a", value: ">"},
			binReq{op: binGet, key: "a"}),
		ex("append miss", binReq{op: binAppend, key: "nope", value: "x"}),
		ex("append with a stale cas", binReq{op: binAppend, key: "a", value: "x", cas: 1}),
		ex("cas set stale", set(binSet, "a", "x", 0, 1)),
		ex("cas set on a miss", set(binSet, "nope", "x", 0, 1)),
		ex("quiet set drops success, shows failure", set(binSetQ, "q", "v", 0, 0), set(binAddQ, "q", "w", 0, 0),
			binReq{op: binGet, key: "q"}),
		ex("delete", binReq{op: binDelete, key: "b"}, binReq{op: binDelete, key: "b"}),
		ex("delete with a stale cas", binReq{op: binDelete, key: "q", cas: 1}),
		ex("quiet delete", binReq{op: binDeleteQ, key: "q"}, binReq{op: binDeleteQ, key: "q"}),
		ex("incr", set(binSet, "n", "10", 0, 0), binReq{op: binIncr, key: "n", extras: arithExtras(5, 0, 0)},
			binReq{op: binDecr, key: "n", extras: arithExtras(20, 0, 0)}, binReq{op: binGet, key: "n"}),
		ex("incr creates", binReq{op: binIncr, key: "c", extras: arithExtras(5, 42, 0)},
			binReq{op: binIncr, key: "c", extras: arithExtras(5, 42, 0)}, binReq{op: binGet, key: "c"}),
		ex("incr miss without create", binReq{op: binIncr, key: "nope", extras: arithExtras(1, 0, 0xffffffff)}),
		ex("incr non-numeric", binReq{op: binIncr, key: "a", extras: arithExtras(1, 0, 0)}),
		ex("incr with a stale cas", binReq{op: binIncr, key: "c", extras: arithExtras(1, 0, 0), cas: 1}),
		ex("quiet incr", binReq{op: binIncrQ, key: "c", extras: arithExtras(1, 0, 0)}, binReq{op: binGet, key: "c"}),
		ex("touch", binReq{op: binTouch, key: "a", extras: u32(100)}, binReq{op: binTouch, key: "nope", extras: u32(100)}),
		ex("gat", binReq{op: binGAT, key: "a", extras: u32(100)}, binReq{op: binGATK, key: "a", extras: u32(100)},
			binReq{op: binGAT, key: "nope", extras: u32(100)}, binReq{op: binGATK, key: "nope", extras: u32(100)}),
		ex("quiet gat", binReq{op: binGATQ, key: "nope", extras: u32(100)}, binReq{op: binGATKQ, key: "nope", extras: u32(100)},
			binReq{op: binGATKQ, key: "a", extras: u32(100)}),
		ex("unknown opcode", binReq{op: 0x50, opaque: 3}),
		ex("stat of an unknown group", binReq{op: binStat, key: "nosuchgroup"}),
		ex("stats reset", binReq{op: binStat, key: "reset"}),
		ex("sasl when off", binReq{op: binSASLList}),
		closing("key too long", binReq{op: binGet, key: strings.Repeat("k", 251)}),
		closing("set without extras", binReq{op: binSet, key: "x", value: "v"}),
		closing("get with extras", binReq{op: binGet, key: "a", extras: u32(1)}),
		ex("value over the item size", set(binSet, "big", strings.Repeat("v", 1<<20+1), 0, 0), binReq{op: binGet, key: "big"}),
		ex("expired", binReq{op: binSet, key: "e", extras: storeExtras(0, 0xffffff00), value: "gone"}, binReq{op: binGet, key: "e"}),
		ex("flush", binReq{op: binFlushQ}, binReq{op: binGet, key: "a"}, binReq{op: binFlush}),
	}
}

// binSide is one server's connection in the differential test.
type binSide struct {
	name, addr string
	conn       net.Conn
}

// dial (re)connects s.
func (s *binSide) dial(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s.conn = c
}

// exchange sends reqs (keys prefixed) and a final Noop, and returns every
// response up to the Noop's, CAS values zeroed (kvd's are log indexes).
func (s *binSide) exchange(reqs []binReq, prefix string, closes bool) ([][]byte, error) {
	var out bytes.Buffer
	for _, r := range reqs {
		if r.key != "" {
			r.key = prefix + r.key
		}
		out.Write(r.bytes())
	}
	out.Write(binReq{op: binNoop, opaque: 0xfeedface}.bytes())
	if err := s.conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := s.conn.Write(out.Bytes()); err != nil {
		return nil, err
	}
	var got [][]byte
	for {
		hdr := make([]byte, 24)
		if _, err := io.ReadFull(s.conn, hdr); err != nil {
			if closes && err == io.EOF {
				return got, nil
			}
			return got, fmt.Errorf("after %d responses: %w", len(got), err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[8:]))
		if _, err := io.ReadFull(s.conn, body); err != nil {
			return got, fmt.Errorf("body after %d responses: %w", len(got), err)
		}
		if hdr[1] == binNoop && binary.BigEndian.Uint32(hdr[12:]) == 0xfeedface {
			if closes {
				return got, errors.New("the connection stayed open")
			}
			return got, nil
		}
		for i := 16; i < 24; i++ {
			hdr[i] = 0
		}
		got = append(got, append(hdr, body...))
	}
}

// runBinaryDifferential plays every exchange to memcached and to kvd on
// one connection each and requires the same responses, byte for byte
// but for the CAS values.
func runBinaryDifferential(t *testing.T, mcAddr, kvdAddr string) {
	mc, kvd := &binSide{name: "memcached", addr: mcAddr}, &binSide{name: "kvd", addr: kvdAddr}
	mc.dial(t)
	kvd.dial(t)
	prefix := fmt.Sprintf("bd%d_", time.Now().UnixNano())
	before := []map[string]uint64{counters(t, mcAddr), counters(t, kvdAddr)}
	compared := 0
	defer func() {
		// The table answers about 60 responses; a harness that compared
		// none would pass anything.
		if !t.Failed() {
			require.GreaterOrEqual(t, compared, 50, "responses compared")
		}
	}()
	for _, ex := range binaryExchanges() {
		want, err := mc.exchange(ex.reqs, prefix, ex.closes)
		require.NoError(t, err, "memcached: %s", ex.name)
		got, err := kvd.exchange(ex.reqs, prefix, ex.closes)
		require.NoError(t, err, "kvd: %s", ex.name)
		require.Equal(t, render(want), render(got), "%s", ex.name)
		compared += len(want)
		if ex.closes {
			mc.dial(t)
			kvd.dial(t)
		}
	}
	// The stats counters moved alike: binary requests count as memcached
	// counts them.
	after := []map[string]uint64{counters(t, mcAddr), counters(t, kvdAddr)}
	for _, name := range comparedCounters {
		require.Equal(t, after[0][name]-before[0][name], after[1][name]-before[1][name],
			"%s: memcached moved by %d, kvd by %d", name, after[0][name]-before[0][name], after[1][name]-before[1][name])
	}
}

// render shows responses readably for a failed comparison.
func render(rs [][]byte) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("op=%#02x status=%#04x extras=%d key=%d opaque=%x body=%q",
			r[1], binary.BigEndian.Uint16(r[6:]), r[4], binary.BigEndian.Uint16(r[2:]), r[12:16], r[24:])
	}
	return out
}

// TestBinaryDifferential: kvd answers the binary table as memcached 1.6.18
// does, on one node and through a follower of a 3-node cluster.
func TestBinaryDifferential(t *testing.T) {
	needMemcached(t)
	mc := startMemcached(t, memcachedBin)
	t.Run("one node", func(t *testing.T) {
		p := kvdproc.Start(t, t.TempDir())
		p.WaitClusterVersion()
		runBinaryDifferential(t, mc, p.MemcacheAddr)
	})
	t.Run("follower", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 3-node cluster")
		}
		runBinaryDifferential(t, mc, clusterFollower(t).MemcacheAddr)
	})
}

// TestBinaryStatsPackets: a Stat request without a group is answered with
// one packet per statistic and an empty one to end them; kvd's carry every
// field memcached's do, in memcached's order (the values differ, as the
// text protocol's do).
func TestBinaryStatsPackets(t *testing.T) {
	needMemcached(t)
	p := kvdproc.Start(t, t.TempDir())
	names := func(addr string) []string {
		s := &binSide{name: addr, addr: addr}
		s.dial(t)
		rs, err := s.exchange([]binReq{{op: binStat, opaque: 5}}, "", false)
		require.NoError(t, err)
		require.NotEmpty(t, rs)
		var out []string
		for i, r := range rs {
			require.Equal(t, byte(binStat), r[1])
			require.Equal(t, []byte{0, 0}, r[6:8], "status of packet %d", i)
			require.Equal(t, []byte{0, 0, 0, 5}, r[12:16], "opaque of packet %d", i)
			keyLen := int(binary.BigEndian.Uint16(r[2:]))
			if i == len(rs)-1 {
				require.Zero(t, keyLen, "the last packet is the empty one")
				require.Len(t, r, 24)
				continue
			}
			require.Positive(t, keyLen, "packet %d", i)
			out = append(out, string(r[24+int(r[4]):24+int(r[4])+keyLen]))
		}
		return out
	}
	mc, kvd := names(startMemcached(t, memcachedBin)), names(p.MemcacheAddr)
	require.Greater(t, len(mc), 80)
	at := map[string]int{}
	for i, n := range kvd {
		at[n] = i
	}
	last := -1
	for _, n := range mc {
		i, ok := at[n]
		require.True(t, ok, "kvd's binary stats lack %s", n)
		require.Greater(t, i, last, "%s out of memcached's order", n)
		last = i
	}
}

// TestBinaryDifferentialSelf checks the harness on memcached alone: two
// memcacheds must answer the table alike, or a difference with kvd would
// mean nothing.
func TestBinaryDifferentialSelf(t *testing.T) {
	needMemcached(t)
	runBinaryDifferential(t, startMemcached(t, memcachedBin), startMemcached(t, memcachedBin))
}
