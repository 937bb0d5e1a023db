package robustness

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeMeta answers the first request on each connection (its line, an
// ms's data block, and the mn that follows a quiet request) with reply,
// then, when cut, closes the connection at once (a reply cut off where
// reply ends), or else reads on until the client closes it. Each request
// read is sent on the returned channel.
func fakeMeta(t *testing.T, reply string, cut bool) (string, <-chan string) {
	reqs := make(chan string, 4)
	addr := serveLoopback(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		req := line
		if strings.HasPrefix(line, "ms ") {
			data, err := r.ReadString('\n')
			if err != nil {
				return
			}
			req += data
		}
		if strings.HasSuffix(line, " q\r\n") {
			mn, err := r.ReadString('\n')
			if err != nil {
				return
			}
			req += mn
		}
		reqs <- req
		_, _ = c.Write([]byte(reply))
		if cut {
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, r)
	})
	return addr, reqs
}

// Draws for metaConn.draw: loud requests with default modes, or quiet
// ones with explicit modes (MS, MI).
var (
	drawLoud  = func(n int) int { return n - 1 }
	drawQuiet = func(int) int { return 0 }
)

// TestMetaClientSpeaksTheModelsWords: every meta reply shape the workload
// can get reaches the model in the text protocol's words; a SERVER_ERROR
// is a server failure (an unknown outcome for a write); any reply no
// memcached would send to the request, including an error line, a reply
// with an unasked, missing or foreign flag and a quiet request's nominal
// reply, is a protocol violation, never a result.
func TestMetaClientSpeaksTheModelsWords(t *testing.T) {
	get := func(withCAS bool) func(*metaConn) (string, error) {
		return func(m *metaConn) (string, error) {
			it, err := m.get("key", withCAS)
			switch {
			case err != nil:
				return "", err
			case !it.Found:
				return "END", nil
			case withCAS:
				return it.Value + " cas " + strconv.FormatUint(it.CAS, 10), nil
			}
			return it.Value, nil
		}
	}
	store := func(verb string, token uint64) func(*metaConn) (string, error) {
		return func(m *metaConn) (string, error) { return m.store(verb, "key", "v", token) }
	}
	del := func(m *metaConn) (string, error) { return m.delete("key") }
	arith := func(verb string) func(*metaConn) (string, error) {
		return func(m *metaConn) (string, error) { return m.arith(verb, "key", 3) }
	}
	tests := []struct {
		name    string
		quiet   bool
		do      func(*metaConn) (string, error)
		reply   string
		wantReq string // "" to not check it
		want    string
		wantErr error
	}{
		// mg
		{"get hit", false, get(false), "VA 1 f0 kkey O1\r\nv\r\n", "mg key v f k O1\r\n", "v", nil},
		{"gets hit", false, get(true), "VA 2 f0 c77 kkey O1\r\nvv\r\n", "mg key v f c k O1\r\n", "vv cas 77", nil},
		{"flags in another order", false, get(true), "VA 1 O1 kkey c77 f0\r\nv\r\n", "", "v cas 77", nil},
		{"empty value", false, get(false), "VA 0 f0 kkey O1\r\n\r\n", "", "", nil},
		{"get miss", false, get(false), "EN kkey O1\r\n", "", "END", nil},
		{"quiet get miss", true, get(false), "MN\r\n", "mg key v f k O1 q\r\nmn\r\n", "END", nil},
		{"quiet get hit", true, get(true), "VA 1 f0 c9 kkey O1\r\nv\r\nMN\r\n", "mg key v f c k O1 q\r\nmn\r\n", "v cas 9", nil},
		{"quiet get shows EN", true, get(false), "EN kkey O1\r\nMN\r\n", "", "", errProtocol},
		{"quiet get hit without MN", true, get(false), "VA 1 f0 kkey O1\r\nv\r\nEN kkey O1\r\n", "", "", errProtocol},
		{"MN to a loud mg", false, get(false), "MN\r\n", "", "", errProtocol},
		{"hit of another key", false, get(false), "VA 1 f0 kother O1\r\nv\r\n", "", "", errProtocol},
		{"miss of another key", false, get(false), "EN kother O1\r\n", "", "", errProtocol},
		{"another request's opaque", false, get(false), "VA 1 f0 kkey O2\r\nv\r\n", "", "", errProtocol},
		{"no opaque", false, get(false), "VA 1 f0 kkey\r\nv\r\n", "", "", errProtocol},
		{"flags never written", false, get(false), "VA 1 f7 kkey O1\r\nv\r\n", "", "", errProtocol},
		{"cas on a plain get", false, get(false), "VA 1 f0 c5 kkey O1\r\nv\r\n", "", "", errProtocol},
		{"no cas on gets", false, get(true), "VA 1 f0 kkey O1\r\nv\r\n", "", "", errProtocol},
		{"bad cas", false, get(true), "VA 1 f0 c-1 kkey O1\r\nv\r\n", "", "", errProtocol},
		{"flag twice", false, get(false), "VA 1 f0 f0 kkey O1\r\nv\r\n", "", "", errProtocol},
		{"won a token never offered", false, get(false), "VA 1 f0 kkey O1 W\r\nv\r\n", "", "", errProtocol},
		{"stale item", false, get(false), "VA 1 f0 kkey O1 X\r\nv\r\n", "", "", errProtocol},
		{"token already sent", false, get(false), "VA 1 f0 kkey O1 Z\r\nv\r\n", "", "", errProtocol},
		{"doubled space", false, get(false), "VA 1  f0 kkey O1\r\nv\r\n", "", "", errProtocol},
		{"bad length", false, get(false), "VA x f0 kkey O1\r\nv\r\n", "", "", errProtocol},
		{"no length", false, get(false), "VA\r\nv\r\n", "", "", errProtocol},
		{"value longer than its length", false, get(false), "VA 1 f0 kkey O1\r\nvx\r\n", "", "", errProtocol},
		{"HD to mg v", false, get(false), "HD f0 kkey O1\r\n", "", "", errProtocol},
		{"text reply to mg", false, get(false), "END\r\n", "", "", errProtocol},
		{"unknown-command error to mg", false, get(false), "ERROR\r\n", "", "", errProtocol},
		{"client error to mg", false, get(false), "CLIENT_ERROR bad command line format\r\n", "", "", errProtocol},
		{"server error to mg", false, get(false), "SERVER_ERROR timeout\r\n", "", "", errServer},

		// ms
		{"set", false, store("set", 0), "HD O1\r\n", "ms key 1 O1\r\nv\r\n", "STORED", nil},
		{"set with MS", true, store("set", 0), "MN\r\n", "ms key 1 MS O1 q\r\nv\r\nmn\r\n", "STORED", nil},
		{"set not stored", false, store("set", 0), "NS O1\r\n", "", "", errProtocol},
		{"add", false, store("add", 0), "HD O1\r\n", "ms key 1 ME O1\r\nv\r\n", "STORED", nil},
		{"add of an existing key", false, store("add", 0), "NS O1\r\n", "", "NOT_STORED", nil},
		{"add answered exists", false, store("add", 0), "EX O1\r\n", "", "", errProtocol},
		{"replace of a missing key", false, store("replace", 0), "NS O1\r\n", "ms key 1 MR O1\r\nv\r\n", "NOT_STORED", nil},
		{"replace answered not found", false, store("replace", 0), "NF O1\r\n", "", "", errProtocol},
		{"append", false, store("append", 0), "HD O1\r\n", "ms key 1 MA O1\r\nv\r\n", "STORED", nil},
		{"prepend of a missing key", false, store("prepend", 0), "NS O1\r\n", "ms key 1 MP O1\r\nv\r\n", "NOT_STORED", nil},
		{"cas", false, store("cas", 5), "HD O1\r\n", "ms key 1 C5 O1\r\nv\r\n", "STORED", nil},
		{"cas stale", false, store("cas", 5), "EX O1\r\n", "", "EXISTS", nil},
		{"cas missing", false, store("cas", 5), "NF O1\r\n", "", "NOT_FOUND", nil},
		{"cas not stored", false, store("cas", 5), "NS O1\r\n", "", "", errProtocol},
		{"quiet add not stored", true, store("add", 0), "NS O1\r\nMN\r\n", "ms key 1 ME O1 q\r\nv\r\nmn\r\n", "NOT_STORED", nil},
		{"quiet cas stale", true, store("cas", 5), "EX O1\r\nMN\r\n", "ms key 1 C5 O1 q\r\nv\r\nmn\r\n", "EXISTS", nil},
		{"quiet set answered HD", true, store("set", 0), "HD O1\r\nMN\r\n", "", "", errProtocol},
		{"quiet add without MN", true, store("add", 0), "NS O1\r\nNS O1\r\n", "", "", errProtocol},
		{"MN to a loud ms", false, store("set", 0), "MN\r\n", "", "", errProtocol},
		{"ms reply with a flag not asked", false, store("set", 0), "HD O1 c9\r\n", "", "", errProtocol},
		{"ms reply to another request", false, store("set", 0), "HD O7\r\n", "", "", errProtocol},
		{"text reply to ms", false, store("set", 0), "STORED\r\n", "", "", errProtocol},
		{"server error to ms", false, store("set", 0), "SERVER_ERROR timeout\r\n", "", "", errServer},
		{"server error to a quiet ms", true, store("set", 0), "SERVER_ERROR timeout\r\nMN\r\n", "", "", errServer},
		{"too many connections", false, store("set", 0), "ERROR Too many open connections\r\n", "", "", errServer},
		{"unknown-command error to ms", false, store("set", 0), "ERROR\r\n", "", "", errProtocol},

		// md
		{"delete", false, del, "HD O1\r\n", "md key O1\r\n", "DELETED", nil},
		{"delete miss", false, del, "NF O1\r\n", "", "NOT_FOUND", nil},
		{"quiet delete", true, del, "MN\r\n", "md key O1 q\r\nmn\r\n", "DELETED", nil},
		{"quiet delete miss", true, del, "NF O1\r\nMN\r\n", "", "NOT_FOUND", nil},
		{"MN to a loud md", false, del, "MN\r\n", "", "", errProtocol},
		{"delete answered exists", false, del, "EX O1\r\n", "", "", errProtocol},
		{"client error to md", false, del, "CLIENT_ERROR bad command line format\r\n", "", "", errProtocol},

		// ma
		{"incr", false, arith("incr"), "VA 2 O1\r\n42\r\n", "ma key D3 v O1\r\n", "42", nil},
		{"incr with MI", true, arith("incr"), "VA 2 O1\r\n42\r\n", "ma key D3 MI v O1\r\n", "42", nil},
		{"decr", false, arith("decr"), "VA 1 O1\r\n0\r\n", "ma key D3 MD v O1\r\n", "0", nil},
		{"incr miss", false, arith("incr"), "NF O1\r\n", "", "NOT_FOUND", nil},
		{"wrapped counter", false, arith("incr"), "VA 20 O1\r\n18446744073709551615\r\n", "", "18446744073709551615", nil},
		{"padded number", false, arith("incr"), "VA 3 O1\r\n42 \r\n", "", "", errProtocol},
		{"not a number", false, arith("incr"), "VA 2 O1\r\n4x\r\n", "", "", errProtocol},
		{"leading zero", false, arith("incr"), "VA 2 O1\r\n07\r\n", "", "", errProtocol},
		{"HD to ma v", false, arith("incr"), "HD O1\r\n", "", "", errProtocol},
		{"ma answered exists", false, arith("decr"), "EX O1\r\n", "", "", errProtocol},
		// As mcConn reports it: the workload's counters are numeric.
		{"non-numeric counter", false, arith("incr"), "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n", "", "", errProtocol},
		{"server error to ma", false, arith("decr"), "SERVER_ERROR out of memory\r\n", "", "", errServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, reqs := fakeMeta(t, tt.reply, false)
			m, err := dialMeta(addr, 2*time.Second, 1, nil)
			require.NoError(t, err)
			defer m.Close()
			m.draw = drawLoud
			if tt.quiet {
				m.draw = drawQuiet
			}
			got, err := tt.do(m)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				// Never both: a server's failure is not its bug.
				assert.False(t, errors.Is(err, errProtocol) && errors.Is(err, errServer), "%v", err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
			}
			if tt.wantReq != "" {
				select {
				case req := <-reqs:
					assert.Equal(t, tt.wantReq, req)
				case <-time.After(5 * time.Second):
					t.Fatal("the fake server read no request")
				}
			}
		})
	}
}

// TestMetaClientCutMidReply: a connection cut anywhere in a reply, or
// before a quiet request's MN, leaves a write's outcome unknown and drops
// a read, as for the text and binary clients; it is not a protocol
// violation. Client 2 speaks meta.
func TestMetaClientCutMidReply(t *testing.T) {
	tests := []struct {
		name  string
		in    Input
		reply string
		quiet bool
	}{
		{"set, nothing sent back", Input{Op: OpSet, Value: "x"}, "", false},
		{"set, within the code", Input{Op: OpSet, Value: "x"}, "H", false},
		{"set, before the line's end", Input{Op: OpSet, Value: "x"}, "HD O1", false},
		{"quiet add, before MN", Input{Op: OpAdd, Value: "x"}, "NS O1\r\n", true},
		{"quiet set, within MN", Input{Op: OpSet, Value: "x"}, "M", true},
		{"cas, before the line's end", Input{Op: OpCAS, Value: "x", Token: 3}, "EX", false},
		{"delete, within the opaque", Input{Op: OpDelete}, "HD O", false},
		{"incr, within the value", Input{Op: OpIncr, Delta: 1}, "VA 2 O1\r\n4", false},
		{"decr, before the value", Input{Op: OpDecr, Delta: 1}, "VA 2 O1\r\n", false},
		{"get, within the header", Input{Op: OpGet}, "VA 5 f0 kk", false},
		{"gets, within the value", Input{Op: OpGets}, "VA 5 f0 c3 kk O1\r\nhel", false},
		{"gets, before the value's \\r\\n", Input{Op: OpGets}, "VA 5 f0 c3 kk O1\r\nhello", false},
		{"quiet get, before MN", Input{Op: OpGet}, "VA 1 f0 kk O1\r\nv\r\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := fakeMeta(t, tt.reply, true)
			h := newHistory()
			n := &Node{Name: "fake", MemcacheAddr: addr}
			c := newClient(2, n, []*Node{n}, 2*time.Second, 1, h)
			defer c.close()
			require.Equal(t, protoMeta, c.proto)
			// Dial first, to fix the connection's draws.
			m, err := dialMeta(addr, 2*time.Second, 1, nil)
			require.NoError(t, err)
			m.draw = drawLoud
			if tt.quiet {
				m.draw = drawQuiet
			}
			c.conns[n] = m
			_, err = c.do(n, "k", tt.in)
			require.Error(t, err)
			assert.NotErrorIs(t, err, errProtocol)
			assert.NotErrorIs(t, err, errServer)
			st := h.Stats()
			if tt.in.Op == OpGet || tt.in.Op == OpGets {
				assert.Equal(t, Stats{FailedReads: 1}, st, "a failed read is dropped")
			} else {
				assert.Equal(t, Stats{Ops: 1, Writes: 1, Unknown: 1}, st, "a write's outcome is unknown")
				require.True(t, h.Ops()[0].Output.Unknown)
			}
			assert.Empty(t, c.conns, "the connection is dropped after an error")
		})
	}
}

// TestProtocolsByClientID: clients speak text, binary and meta in turn,
// so the pinned first three of a 3-node run cover every protocol.
func TestProtocolsByClientID(t *testing.T) {
	want := []protocol{protoText, protoBinary, protoMeta, protoText, protoBinary, protoMeta}
	for id, p := range want {
		assert.Equal(t, p, newClient(id, nil, nil, time.Second, 1, newHistory()).proto, "client %d", id)
	}
	// …and each dials its own kind of connection.
	addr, _ := fakeMeta(t, "", false)
	for id, kind := range []mcClient{(*mcConn)(nil), (*binConn)(nil), (*metaConn)(nil)} {
		c := newClient(id, nil, nil, 2*time.Second, 1, newHistory())
		mc, err := c.dial(addr, nil)
		require.NoError(t, err)
		assert.IsType(t, kind, mc, "client %d", id)
		require.NoError(t, mc.Close())
	}
}
