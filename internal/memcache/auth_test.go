package memcache_test

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/node"
)

// startAuthNode runs a node whose memcache port needs alice's password,
// "secret" (bcrypt at its minimum cost, for speed).
func startAuthNode(t *testing.T) *node.Node {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "htpasswd")
	require.NoError(t, os.WriteFile(path, []byte("alice:"+string(h)+"\n"), 0o600))
	return startNode(t, func(c *config.Config) { c.AuthFile = path })
}

// TestAuthText: the text protocol's authentication, memcached's -Y
// exchange, each case on a connection of its own.
func TestAuthText(t *testing.T) {
	n := startAuthNode(t)
	for _, tc := range []struct {
		name string
		req  string
		want string // the first reply line
	}{
		{"get", "get k\r\n", "CLIENT_ERROR unauthenticated"},
		{"version", "version\r\n", "CLIENT_ERROR unauthenticated"},
		{"stats", "stats\r\n", "CLIENT_ERROR unauthenticated"},
		{"flush_all", "flush_all\r\n", "CLIENT_ERROR unauthenticated"},
		{"meta get", "mg k v\r\n", "CLIENT_ERROR unauthenticated"},
		{"meta set", "ms k 12\r\nalice secret\r\n", "CLIENT_ERROR unauthenticated"},
		{"add is no login", "add k 0 0 12\r\nalice secret\r\n", "CLIENT_ERROR unauthenticated"},
		{"unknown command", "bogus\r\n", "CLIENT_ERROR unauthenticated"},
		{"noreply is answered", "delete k noreply\r\n", "CLIENT_ERROR unauthenticated"},
		{"wrong password", "set k 0 0 11\r\nalice wrong\r\n", "CLIENT_ERROR authentication failure"},
		{"unknown user", "set k 0 0 12\r\nmallo secret\r\n", "CLIENT_ERROR authentication failure"},
		{"no space", "set k 0 0 5\r\nalice\r\n", "CLIENT_ERROR bad authentication token format"},
		{"bad termination", "set k 0 0 3\r\nalice secret\r\n", "CLIENT_ERROR bad command line termination"},
		{"too long", "set k 0 0 20000\r\n" + strings.Repeat("a", 20000) + "\r\n", "CLIENT_ERROR auth token too long"},
		{"over the item size", "set k 0 0 2000000\r\n" + strings.Repeat("a", 2000000) + "\r\n", "CLIENT_ERROR auth token too long"},
		{"login", "set k 0 0 12\r\nalice secret\r\n", "STORED"},
		{"login with noreply", "set any 1 2 12 noreply\r\nalice secret\r\n", "STORED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, n.MemcacheAddr())
			got := c.do(tc.req, "STORED")
			assert.Equal(t, tc.want, got[0])
		})
	}

	t.Run("after login the connection is served", func(t *testing.T) {
		c := dial(t, n.MemcacheAddr())
		require.Equal(t, []string{"STORED"}, c.do("set k 0 0 12\r\nalice secret\r\n", "STORED"))
		assert.Equal(t, []string{"END"}, c.do("get k\r\n"), "the login stores nothing")
		assert.Equal(t, []string{"STORED"}, c.do("set k 0 0 2\r\nhi\r\n", "STORED"))
		assert.Equal(t, []string{"VALUE k 0 2", "hi", "END"}, c.do("get k\r\n"))
		assert.Equal(t, []string{"MN"}, c.do("mn\r\n", "MN"), "meta too")
		st := stats(t, c.do("stats\r\n"))
		assert.NotEqual(t, "0", st["auth_cmds"])
		assert.NotEqual(t, "0", st["auth_errors"])
	})

	t.Run("a failed login leaves the connection open", func(t *testing.T) {
		c := dial(t, n.MemcacheAddr())
		require.Equal(t, []string{"CLIENT_ERROR authentication failure"}, c.do("set k 0 0 11\r\nalice wrong\r\n", "STORED"))
		require.Equal(t, []string{"STORED"}, c.do("set k 0 0 12\r\nalice secret\r\n", "STORED"))
	})

	t.Run("quit closes", func(t *testing.T) {
		nc, err := net.Dial("tcp", n.MemcacheAddr())
		require.NoError(t, err)
		defer nc.Close()
		_, err = nc.Write([]byte("quit\r\n"))
		require.NoError(t, err)
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
		rest, err := io.ReadAll(nc)
		require.NoError(t, err)
		assert.Empty(t, rest)
	})
}

// binReply is one binary-protocol response.
type binReply struct {
	opcode byte
	status uint16
	value  string
}

// binDo sends one request and reads one response.
func binDo(t *testing.T, nc net.Conn, req []byte) binReply {
	t.Helper()
	_, err := nc.Write(req)
	require.NoError(t, err)
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	h := make([]byte, 24)
	_, err = io.ReadFull(nc, h)
	require.NoError(t, err)
	require.Equal(t, byte(0x81), h[0])
	body := make([]byte, binary.BigEndian.Uint32(h[8:12]))
	_, err = io.ReadFull(nc, body)
	require.NoError(t, err)
	skip := int(h[4]) + int(binary.BigEndian.Uint16(h[2:4]))
	return binReply{opcode: h[1], status: binary.BigEndian.Uint16(h[6:8]), value: string(body[skip:])}
}

func binDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}

// TestAuthBinarySASL: SASL PLAIN as memcached's -S answers it.
func TestAuthBinarySASL(t *testing.T) {
	n := startAuthNode(t)
	authFail := binReply{0x21, 0x20, "Auth failure."}
	plain := func(msg string) []byte { return binaryPacket(0x21, []byte("PLAIN"), nil, []byte(msg)) }

	nc := binDial(t, n.MemcacheAddr())
	assert.Equal(t, binReply{0x20, 0, "PLAIN"}, binDo(t, nc, binaryPacket(0x20, nil, nil, nil)), "list mechanisms")
	v := binDo(t, nc, binaryPacket(0x0b, nil, nil, nil))
	assert.Equal(t, uint16(0), v.status, "version is answered before authentication")
	for _, msg := range []string{
		"\x00alice\x00wrong",      // wrong password
		"\x00mallory\x00secret",   // unknown user
		"\x00alice",               // no password part
		"alice\x00secret",         // no authzid part
		"\x00\x00secret",          // empty user
		"bob\x00alice\x00secret",  // authzid other than the user
		"\x00alice\x00secret\x00", // a NUL too many
	} {
		assert.Equal(t, authFail, binDo(t, nc, plain(msg)), "%q", msg)
	}
	assert.Equal(t, authFail, binDo(t, nc, binaryPacket(0x21, []byte("CRAM-MD5"), nil, []byte("\x00alice\x00secret"))), "unknown mechanism")
	assert.Equal(t, binReply{0x22, 0x20, "Auth failure."}, binDo(t, nc, binaryPacket(0x22, []byte("PLAIN"), nil, []byte("x"))), "step")
	assert.Equal(t, binReply{0x21, 0, "Authenticated"}, binDo(t, nc, plain("\x00alice\x00secret")))
	assert.Equal(t, uint16(0), binDo(t, nc, binaryPacket(0x01, []byte("k"), make([]byte, 8), []byte("v"))).status, "set after login")
	assert.Equal(t, binReply{0x00, 0, "v"}, binDo(t, nc, binaryPacket(0x00, []byte("k"), nil, nil)))
	assert.Equal(t, binReply{0x21, 0, "Authenticated"}, binDo(t, binDial(t, n.MemcacheAddr()), plain("alice\x00alice\x00secret")), "authzid equal to the user")

	// Anything else before authentication: "Auth failure.", then memcached
	// closes the connection.
	for _, req := range [][]byte{
		binaryPacket(0x00, []byte("k"), nil, nil),                     // get
		binaryPacket(0x01, []byte("k"), make([]byte, 8), []byte("v")), // set
		binaryPacket(0x08, nil, nil, nil),                             // flush
		binaryPacket(0x10, nil, nil, nil),                             // stat
		binaryPacket(0x0a, nil, nil, nil),                             // noop
		binaryPacket(0x09, []byte("k"), nil, nil),                     // getq: refused all the same
		binaryPacket(0x1b, nil, nil, nil),                             // an opcode kvd does not serve
	} {
		nc := binDial(t, n.MemcacheAddr())
		r := binDo(t, nc, req)
		assert.Equal(t, binReply{req[1], 0x20, "Auth failure."}, r, "opcode 0x%02x", req[1])
		rest, err := io.ReadAll(nc)
		assert.NoError(t, err)
		assert.Empty(t, rest, "opcode 0x%02x: the connection closes", req[1])
	}
}
