package compat

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// binaryClient is a memcache client library that speaks the binary
// protocol, driven by a script of checks under testdata/clients. Each
// script prints "N passed, N failed"; every expectation in it was taken
// from memcached 1.6.18, which the script is also run against.
type binaryClient struct {
	name      string
	program   string // the interpreter, as Debian installs it
	debianPkg string // what .ci/run installs for it
	script    string
	checks    int // how many checks the script makes
}

var binaryClients = []binaryClient{
	{"pylibmc", debianPython, "python3-pylibmc", "binary_client.py", 31},
	{"dalli", "/usr/bin/ruby", "ruby ruby-dalli", "binary_client.rb", 31},
	{"php-memcached", "/usr/bin/php", "php-cli php-memcached", "binary_client.php", 31},
}

var checksLine = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed$`)

// runBinaryClients runs every binary client's checks against addr, each in
// a subtest (so that a missing client skips, or in CI fails, only itself)
// and each with keys of its own.
func runBinaryClients(t *testing.T, addr string) {
	for _, c := range binaryClients {
		t.Run(c.name, func(t *testing.T) {
			prog := needProgram(t, c.program, c.debianPkg)
			script, err := filepath.Abs(filepath.Join("testdata", "clients", c.script))
			require.NoError(t, err)
			prefix := fmt.Sprintf("%s_%d_", strings.ReplaceAll(c.name, "-", "_"), time.Now().UnixNano())
			cmd := exec.Command(prog, script, addr, prefix)
			cmd.Dir = t.TempDir()
			out, err := cmd.CombinedOutput()
			t.Logf("%s against %s:\n%s", c.name, addr, out)
			m := checksLine.FindSubmatch(out)
			require.NotNil(t, m, "%s printed no closing count (did it load?): %v", c.name, err)
			passed, _ := strconv.Atoi(string(m[1]))
			failed, _ := strconv.Atoi(string(m[2]))
			require.Zero(t, failed, "%s: checks failed", c.name)
			require.Equal(t, c.checks, passed, "%s: every check must run", c.name)
			require.NoError(t, err)
		})
	}
}

// TestBinaryClientsAgainstMemcached keeps the scripts honest: every
// expectation holds against the reference server.
func TestBinaryClientsAgainstMemcached(t *testing.T) {
	needMemcached(t)
	runBinaryClients(t, startMemcached(t, memcachedBin))
}

// TestBinaryClientsAgainstKvd runs the binary client libraries of three
// ecosystems against a kvd node, then memccapable in binary mode and
// libmemcached's command-line tools with --binary.
func TestBinaryClientsAgainstKvd(t *testing.T) {
	p := kvdproc.Start(t, t.TempDir())
	p.WaitClusterVersion()
	runBinaryClients(t, p.MemcacheAddr)
	runMemccapableBinary(t, p.MemcacheAddr)
	runLibmemcachedTools(t, p.MemcacheAddr)
}

// runMemccapableBinary runs memccapable's binary tests (-b).
func runMemccapableBinary(t *testing.T, addr string) {
	t.Run("memccapable -b", func(t *testing.T) {
		bin := needProgram(t, "memccapable", "libmemcached-tools")
		host, port, _ := strings.Cut(addr, ":")
		out, err := exec.Command(bin, "-h", host, "-p", port, "-b", "-t", "10").CombinedOutput()
		require.NoError(t, err, "memccapable -b:\n%s", out)
		require.Contains(t, string(out), "All tests passed")
		require.NotContains(t, string(out), "[fail]")
	})
}

// runLibmemcachedTools copies a file in, reads it back, checks, touches,
// reads stats, removes and flushes with libmemcached's tools in binary mode.
func runLibmemcachedTools(t *testing.T, addr string) {
	t.Run("libmemcached tools --binary", func(t *testing.T) {
		needProgram(t, "memccp", "libmemcached-tools")
		dir := t.TempDir()
		servers := "--servers=" + addr
		run := func(name string, args ...string) string {
			t.Helper()
			cmd := exec.Command(name, append([]string{servers, "--binary"}, args...)...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s %v:\n%s", name, args, out)
			return string(out)
		}
		file := filepath.Join(dir, "greeting")
		require.NoError(t, os.WriteFile(file, []byte("hello over binary\n"), 0o644))
		run("memccp", file)
		require.Equal(t, "hello over binary\n\n", run("memccat", "greeting"), "memccat adds a line end")
		run("memcexist", "greeting")
		run("memctouch", "--expire=100", "greeting")
		require.Contains(t, run("memcstat"), "pid:")
		run("memcrm", "greeting")
		out, err := exec.Command("memcexist", servers, "--binary", "greeting").CombinedOutput()
		require.Error(t, err, "memcexist after memcrm: %s", out)
		run("memccp", file)
		run("memcflush")
		out, err = exec.Command("memccat", servers, "--binary", "greeting").CombinedOutput()
		require.Error(t, err, "memccat after memcflush: %s", out)
	})
}
