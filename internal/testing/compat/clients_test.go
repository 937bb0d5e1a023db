package compat

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// TestMemccapableASCII runs libmemcached's protocol checker, in ASCII mode,
// against a real kvd. It needs memccapable (Debian libmemcached-tools).
func TestMemccapableASCII(t *testing.T) {
	bin := needProgram(t, "memccapable", "libmemcached-tools")
	p := kvdproc.Start(t, t.TempDir())
	host, port, _ := strings.Cut(p.MemcacheAddr, ":")
	out, err := exec.Command(bin, "-h", host, "-p", port, "-a", "-t", "10").CombinedOutput()
	t.Logf("memccapable:\n%s", out)
	require.NoError(t, err)
	require.Contains(t, string(out), "All tests passed")
	require.NotContains(t, string(out), "[fail]")
}

// TestGomemcacheSuite runs the gomemcache package's own client tests against
// a real kvd.
func TestGomemcacheSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds another module")
	}
	p := kvdproc.Start(t, t.TempDir())
	runGomemcacheSuite(t, p.MemcacheAddr)
}

// runGomemcacheSuite runs gomemcache's own client tests against the server
// at addr: a copy of the module from the module cache, with only the server
// address it dials and its client's default timeout changed.
func runGomemcacheSuite(t *testing.T, addr string) {
	t.Helper()
	// go mod download fetches the module when no package built so far
	// needed it (this package alone on a fresh module cache) and names its
	// directory either way; go list -m would print an empty one.
	dlOut, err := exec.Command("go", "mod", "download", "-json", "github.com/bradfitz/gomemcache").Output()
	require.NoError(t, err, "download gomemcache into the module cache")
	var mod struct{ Dir, Error string }
	require.NoError(t, json.Unmarshal(dlOut, &mod), "go mod download -json printed %q", dlOut)
	require.Empty(t, mod.Error, "go mod download gomemcache")
	require.NotEmpty(t, mod.Dir, "go mod download named no directory for gomemcache")
	src := mod.Dir
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
	require.NoError(t, filepath.WalkDir(dst, func(path string, d os.DirEntry, err error) error {
		if err == nil {
			err = os.Chmod(path, 0o755)
		}
		return err
	}))

	testFile := filepath.Join(dst, "memcache", "memcache_test.go")
	b, err := os.ReadFile(testFile)
	require.NoError(t, err)
	const orig = `const localhostTCPAddr = "localhost:11211"`
	require.Contains(t, string(b), orig, "gomemcache's test no longer names its server this way")
	b = []byte(strings.Replace(string(b), orig, `const localhostTCPAddr = "`+addr+`"`, 1))
	require.NoError(t, os.WriteFile(testFile, b, 0o644))
	// The client's socket timeout, half a second, is shorter than a durable
	// write can take on a loaded CI machine; what the suite checks is the
	// protocol, so it gets ten.
	clientFile := filepath.Join(dst, "memcache", "memcache.go")
	b, err = os.ReadFile(clientFile)
	require.NoError(t, err)
	const origTimeout = `DefaultTimeout = 500 * time.Millisecond`
	require.Contains(t, string(b), origTimeout, "gomemcache no longer names its default timeout this way")
	b = []byte(strings.Replace(string(b), origTimeout, `DefaultTimeout = 10 * time.Second`, 1))
	require.NoError(t, os.WriteFile(clientFile, b, 0o644))

	cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "TestLocalhost", "./memcache")
	cmd.Dir = dst
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	t.Logf("gomemcache suite:\n%s", out)
	require.NoError(t, err)
	require.Contains(t, string(out), "--- PASS: TestLocalhost", "the suite must run, not skip")
}

// TestConformanceKvd runs the exchange table, the same one real memcached
// passes in TestConformanceMemcached, against a real kvd process.
func TestConformanceKvd(t *testing.T) {
	p := kvdproc.Start(t, t.TempDir())
	p.WaitClusterVersion() // flush_all's absolute past is gated on it
	runConformance(t, p.MemcacheAddr)
}

// TestClientsAgainstClusterFollower points the conformance table,
// memccapable (text and binary), gomemcache's suite, pymemcache's, the
// binary client libraries and libmemcached's tools at a follower of a
// 3-node cluster:
// every write is forwarded to the leader and every read goes through
// ReadIndex.
func TestClientsAgainstClusterFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	follower := clusterFollower(t)
	runConformance(t, follower.MemcacheAddr)
	// Subtests, so that a missing program skips (or, in CI, fails) only its
	// own part.
	t.Run("memccapable", func(t *testing.T) {
		bin := needProgram(t, "memccapable", "libmemcached-tools")
		host, port, _ := strings.Cut(follower.MemcacheAddr, ":")
		out, err := exec.Command(bin, "-h", host, "-p", port, "-a", "-t", "10").CombinedOutput()
		require.NoError(t, err, "memccapable on a follower:\n%s", out)
		require.Contains(t, string(out), "All tests passed")
		require.NotContains(t, string(out), "[fail]")
	})
	runGomemcacheSuite(t, follower.MemcacheAddr)
	t.Run("pymemcache", func(t *testing.T) {
		runPymemcacheSuite(t, pymemcacheTests(t), follower.MemcacheAddr)
	})
	// The binary protocol's clients and tools, through the same follower.
	runBinaryClients(t, follower.MemcacheAddr)
	runMemccapableBinary(t, follower.MemcacheAddr)
	runLibmemcachedTools(t, follower.MemcacheAddr)
}

// clusterFollower starts a 3-node cluster and returns one of its followers.
func clusterFollower(t *testing.T) *kvdproc.Proc {
	t.Helper()
	procs := kvdproc.StartCluster(t, 3)
	for _, p := range procs {
		p.WaitClusterVersion() // flush_all's absolute past is gated on it
	}
	for _, p := range procs {
		if statOf(t, p.MemcacheAddr, "raft_role") == "follower" {
			return p
		}
	}
	t.Fatal("no follower found")
	return nil
}

// statOf reads one general stat over the memcache port.
func statOf(t *testing.T, addr, name string) string {
	t.Helper()
	return generalStats(t, addr)[name]
}

// generalStats reads `stats` on a connection of its own.
func generalStats(t *testing.T, addr string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, st := range statLines(t, addr) {
		out[st[0]] = st[1]
	}
	return out
}
