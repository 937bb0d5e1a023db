package compat

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// The credentials of the authentication tests: alice and bob.
const (
	authUser     = "alice"
	authPassword = "s3cret pass" // a space: the text exchange splits on the first one only
	authUser2    = "bob"
	authPass2    = "hunter2"
)

// startAuthKvd starts a kvd whose memcache port needs the test's users,
// their passwords hashed at bcrypt cost, as `htpasswd -B -C cost` writes
// them. Tests that do not measure bcrypt use its minimum cost: a
// race-built kvd runs bcrypt many times slower.
func startAuthKvd(t *testing.T, cost int) *kvdproc.Proc {
	t.Helper()
	var file strings.Builder
	file.WriteString("# written by compat's auth tests\n")
	for user, pw := range map[string]string{authUser: authPassword, authUser2: authPass2} {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
		require.NoError(t, err)
		file.WriteString(user + ":$2y$" + string(h[4:]) + "\n") // htpasswd -B's prefix
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	require.NoError(t, os.WriteFile(path, []byte(file.String()), 0o600))
	return kvdproc.Start(t, t.TempDir(), "--auth-file", path)
}

// TestAuthBinaryClients: real client libraries authenticate with SASL
// PLAIN over the binary protocol, store and read back; a wrong password
// gets them nowhere.
func TestAuthBinaryClients(t *testing.T) {
	p := startAuthKvd(t, bcrypt.MinCost)
	host, port, _ := strings.Cut(p.MemcacheAddr, ":")
	for _, c := range []struct {
		name, program, debianPkg string
		args                     func(user, password string) []string
	}{
		{"dalli", "/usr/bin/ruby", "ruby ruby-dalli", func(user, password string) []string {
			return []string{"-e", `
require "dalli"
Dalli.logger.level = Logger::FATAL
c = Dalli::Client.new(ARGV[0], username: ARGV[1], password: ARGV[2], socket_timeout: 30)
begin
  c.set("dalli_auth", "from dalli")
  puts "RESULT " + c.get("dalli_auth").to_s
rescue Dalli::DalliError => e
  puts "REFUSED " + e.class.name
end`, p.MemcacheAddr, user, password}
		}},
		{"pylibmc", debianPython, "python3-pylibmc", func(user, password string) []string {
			return []string{"-c", `
import sys, pylibmc
c = pylibmc.Client([sys.argv[1]], binary=True, username=sys.argv[2], password=sys.argv[3])
try:
    c.set("pylibmc_auth", "from pylibmc")
    print("RESULT", c.get("pylibmc_auth"))
except pylibmc.Error as e:
    print("REFUSED", type(e).__name__)
`, p.MemcacheAddr, user, password}
		}},
		{"php-memcached", "/usr/bin/php", "php-cli php-memcached", func(user, password string) []string {
			return []string{"-r", `
if (!Memcached::HAVE_SASL) { echo "NOSASL\n"; exit(0); }
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->addServer($argv[1], (int)$argv[2]);
$m->setSaslAuthData($argv[3], $argv[4]);
if ($m->set("php_auth", "from php")) { echo "RESULT ", $m->get("php_auth"), "\n"; }
else { echo "REFUSED ", $m->getResultCode(), "\n"; }
`, "--", host, port, user, password}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := needProgram(t, c.program, c.debianPkg)
			run := func(user, password string) string {
				out, err := exec.Command(prog, c.args(user, password)...).CombinedOutput()
				require.NoError(t, err, "%s:\n%s", c.name, out)
				return string(out)
			}
			out := run(authUser, authPassword)
			if strings.Contains(out, "NOSASL") {
				t.Skipf("%s is built without SASL", c.name)
			}
			assert.Contains(t, out, "RESULT from "+strings.TrimSuffix(c.name, "-memcached"))
			out = run(authUser, "wrong")
			assert.Contains(t, out, "REFUSED", "a wrong password")
			assert.NotContains(t, out, "RESULT")
			out = run("mallory", authPassword)
			assert.Contains(t, out, "REFUSED", "an unknown user")
		})
	}
}

// TestAuthPymemcache: pymemcache, a text-protocol client, authenticates
// with memcached's "set" exchange on its own connection, then works.
func TestAuthPymemcache(t *testing.T) {
	p := startAuthKvd(t, bcrypt.MinCost)
	needPython(t, "pymemcache", "python3-pymemcache")
	out, err := exec.Command(debianPython, "-c", `
import sys
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError
host, port = sys.argv[1].rsplit(":", 1)
c = Client((host, int(port)))
try:
    c.get("k")
except MemcacheClientError as e:
    print("BEFORE", e)
try:
    c.set("auth", sys.argv[2] + " wrong", noreply=False)
except MemcacheClientError as e:
    print("WRONG", e)
print("LOGIN", c.set("auth", sys.argv[2] + " " + sys.argv[3], noreply=False))
c.set("py_auth", "from pymemcache", noreply=False)
print("RESULT", c.get("py_auth").decode())
`, p.MemcacheAddr, authUser, authPassword).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "BEFORE b'unauthenticated'")
	assert.Contains(t, string(out), "WRONG b'authentication failure'")
	assert.Contains(t, string(out), "LOGIN True")
	assert.Contains(t, string(out), "RESULT from pymemcache")
}

// needPython skips (or under KVD_REQUIRE_REFERENCE fails) t where Debian's
// python3 cannot import module.
func needPython(t *testing.T, module, debianPkg string) {
	t.Helper()
	needProgram(t, debianPython, "python3")
	if out, err := exec.Command(debianPython, "-c", "import "+module).CombinedOutput(); err != nil {
		if os.Getenv(requireReferenceEnv) != "" {
			t.Fatalf("%s cannot import %s (%v: %s); .ci/run installs Debian's %s", debianPython, module, err, out, debianPkg)
		}
		t.Skipf("%s cannot import %s (Debian: apt-get install %s)", debianPython, module, debianPkg)
	}
}

// textConn is a raw text-protocol connection.
type textConn struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialText(t *testing.T, addr string) *textConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(time.Minute)))
	return &textConn{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// line sends req and returns the first reply line.
func (c *textConn) line(req string) string {
	c.t.Helper()
	_, err := c.nc.Write([]byte(req))
	require.NoError(c.t, err)
	l, err := c.r.ReadString('\n')
	require.NoError(c.t, err, "reply to %q", req)
	return strings.TrimSuffix(l, "\r\n")
}

// login is the text protocol's authentication.
func login(user, password string) string {
	data := user + " " + password
	return "set auth 0 0 " + strconv.Itoa(len(data)) + "\r\n" + data + "\r\n"
}

// stats reads `stats` on c.
func (c *textConn) stats() map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for l := c.line("stats\r\n"); l != "END"; l = c.line("") {
		f := strings.SplitN(l, " ", 3)
		require.Len(c.t, f, 3, "line %q", l)
		out[f[1]] = f[2]
	}
	return out
}

// TestAuthTextRefusals: a raw connection is refused everything but the
// login (and quit), with memcached -Y's exact lines; once logged in, it
// is served.
func TestAuthTextRefusals(t *testing.T) {
	p := startAuthKvd(t, bcrypt.MinCost)
	for _, tc := range []struct{ req, want string }{
		{"get k\r\n", "CLIENT_ERROR unauthenticated"},
		{"set k 0 0 1\r\nx\r\n", "CLIENT_ERROR bad authentication token format"},
		{"mg k v\r\n", "CLIENT_ERROR unauthenticated"},
		{"flush_all\r\n", "CLIENT_ERROR unauthenticated"},
		{"stats\r\n", "CLIENT_ERROR unauthenticated"},
		{"version\r\n", "CLIENT_ERROR unauthenticated"}, // memcached -Y refuses it too
		{login(authUser, "wrong"), "CLIENT_ERROR authentication failure"},
		{login("mallory", authPassword), "CLIENT_ERROR authentication failure"},
		{login(authUser, authPassword), "STORED"},
		{login(authUser2, authPass2), "STORED"},
	} {
		c := dialText(t, p.MemcacheAddr)
		assert.Equal(t, tc.want, c.line(tc.req), "%q", tc.req)
	}

	c := dialText(t, p.MemcacheAddr)
	require.Equal(t, "STORED", c.line(login(authUser, authPassword)))
	assert.Equal(t, "STORED", c.line("set k 0 0 2\r\nhi\r\n"))
	assert.Equal(t, "VALUE k 0 2", c.line("get k\r\n"))
	assert.Equal(t, "hi", c.line(""))
	assert.Equal(t, "END", c.line(""))
	assert.True(t, strings.HasPrefix(c.line("version\r\n"), "VERSION "))
	st := c.stats()
	assert.Equal(t, "5", st["auth_cmds"], "every login that reached the password check")
	assert.Equal(t, "2", st["auth_errors"])
}

// TestAuthBinaryRefusals: over the binary protocol, Version is answered
// before authentication (as memcached answers it); anything else is
// refused with status 0x20 and the connection closed.
func TestAuthBinaryRefusals(t *testing.T) {
	p := startAuthKvd(t, bcrypt.MinCost)
	nc, err := net.DialTimeout("tcp", p.MemcacheAddr, 10*time.Second)
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(time.Minute)))
	r := bufio.NewReader(nc)
	header := func(opcode byte) []byte {
		return []byte{0x80, opcode, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0}
	}
	read := func() (opcode byte, status uint16, body string) {
		h := make([]byte, 24)
		_, err := io.ReadFull(r, h)
		require.NoError(t, err)
		b := make([]byte, int(h[8])<<24|int(h[9])<<16|int(h[10])<<8|int(h[11]))
		_, err = io.ReadFull(r, b)
		require.NoError(t, err)
		return h[1], uint16(h[6])<<8 | uint16(h[7]), string(b)
	}
	_, err = nc.Write(header(0x0b)) // version
	require.NoError(t, err)
	op, status, _ := read()
	assert.Equal(t, byte(0x0b), op)
	assert.Zero(t, status, "version before authentication")
	_, err = nc.Write(header(0x10)) // stat
	require.NoError(t, err)
	op, status, body := read()
	assert.Equal(t, byte(0x10), op)
	assert.Equal(t, uint16(0x20), status)
	assert.Equal(t, "Auth failure.", body)
	_, err = r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the connection closes after the refusal")
}

// TestAuthFailureFlood: 200 failed logins at once neither crash the node
// nor flood its log (failures are logged at most once a second), and a
// good login still works during and after them.
func TestAuthFailureFlood(t *testing.T) {
	p := startAuthKvd(t, bcrypt.MinCost)
	start := time.Now()
	var wg sync.WaitGroup
	var refused atomic.Int64
	for g := range 20 {
		wg.Go(func() {
			c := dialText(t, p.MemcacheAddr)
			for i := range 10 {
				if c.line(login(authUser, "guess-"+strconv.Itoa(g*10+i))) == "CLIENT_ERROR authentication failure" {
					refused.Add(1)
				}
			}
		})
	}
	c := dialText(t, p.MemcacheAddr)
	assert.Equal(t, "STORED", c.line(login(authUser, authPassword)), "a good login amid the flood")
	wg.Wait()
	elapsed := time.Since(start)
	assert.EqualValues(t, 200, refused.Load())
	assert.Equal(t, "STORED", c.line("set k 0 0 1\r\nx\r\n"))

	lines := strings.Count(p.Log.String(), `msg="authentication failed"`)
	assert.Positive(t, lines)
	assert.LessOrEqual(t, lines, int(elapsed/time.Second)+2, "failure lines in %v", elapsed)
	assert.NotContains(t, p.Log.String(), "guess-", "a password in the log")
	st := c.stats()
	assert.Equal(t, "200", st["auth_errors"])
}

// TestAuthManyConnectionsAtOnce: 300 connections logging in at once with
// the same credentials all succeed, at about the cost of one bcrypt: the
// store remembers a verified pair, and checks of the same pair wait for
// the first rather than each running bcrypt.
func TestAuthManyConnectionsAtOnce(t *testing.T) {
	p := startAuthKvd(t, bcrypt.DefaultCost)
	// What one bcrypt costs this kvd: bob's first login.
	t0 := time.Now()
	require.Equal(t, "STORED", dialText(t, p.MemcacheAddr).line(login(authUser2, authPass2)))
	one := time.Since(t0)

	const n = 300
	conns := make([]*textConn, n)
	for i := range conns {
		conns[i] = dialText(t, p.MemcacheAddr)
	}
	start := time.Now()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for _, c := range conns {
		wg.Go(func() {
			_, err := c.nc.Write([]byte(login(authUser, authPassword)))
			if err != nil {
				return
			}
			if l, err := c.r.ReadString('\n'); err == nil && l == "STORED\r\n" {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	assert.EqualValues(t, n, ok.Load())
	// One bcrypt per connection would take n/NumCPU of them at least
	// (the store runs NumCPU at a time); where that is long enough to
	// tell apart, the logins must take well under it.
	perConn := time.Duration(n/runtime.NumCPU()) * one
	t.Logf("one bcrypt login %v; %d logins at once %v (one bcrypt each: at least %v)", one, n, elapsed, perConn)
	if perConn >= 4*one {
		assert.Less(t, elapsed, perConn/2)
	}
	assert.Equal(t, "STORED", conns[n-1].line("set k 0 0 1\r\nx\r\n"), "logged in for good")
}
