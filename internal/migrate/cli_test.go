package migrate_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/migrate"
	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// kvdCLI runs the real kvd binary and returns stdout, stderr and its error.
func kvdCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(kvdproc.Binary(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// TestImportCommand runs the real `kvd import --from-memcached --json`.
func TestImportCommand(t *testing.T) {
	mc := startMemcached(t)
	kvd := kvdproc.Start(t, t.TempDir())
	items := dataset(3, 2000, 0)
	load(t, mc.Addr, items)
	out, errOut, err := kvdCLI(t, "import", "--from-memcached", mc.Addr, "--to", kvd.MemcacheAddr, "--json", "--progress-interval", "10ms")
	require.NoError(t, err, errOut)
	var sum migrate.Summary
	require.NoError(t, json.Unmarshal([]byte(out), &sum), out)
	require.True(t, sum.Complete)
	require.True(t, sum.Verified)
	require.Equal(t, uint64(2000), sum.Listed)
	require.Equal(t, uint64(2000), sum.Copied)
	require.Equal(t, uint64(2000), sum.VerifyChecked)
	require.Zero(t, sum.Mismatches)
	require.Contains(t, errOut, "import: ", "progress lines go to stderr")
	require.Zero(t, checkCopied(t, kvd.MemcacheAddr, items))
}

// TestImportCommandSourceKilled: the source dies midway under the real
// command: a non-zero exit, an error naming the source, and the summary
// of what was copied.
func TestImportCommandSourceKilled(t *testing.T) {
	mc := startMemcached(t, "-m", "256")
	kvd := kvdproc.Start(t, t.TempDir())
	items := dataset(4, 20000, 0)
	load(t, mc.Addr, items)
	cmd := exec.Command(kvdproc.Binary(t), "import", "--from-memcached", mc.Addr, "--to", kvd.MemcacheAddr,
		"--workers", "1", "--batch", "10", "--progress-interval", "10ms")
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // this PID only; a no-op once it exited
	var errOut strings.Builder
	sc := bufio.NewScanner(stderr)
	killed := false
	for sc.Scan() {
		errOut.WriteString(sc.Text() + "\n")
		var listed, copied int
		if !killed {
			if _, err := fmt.Sscanf(sc.Text(), "import: %d listed, %d copied", &listed, &copied); err == nil && copied > 0 {
				mc.Kill()
				killed = true
			}
		}
	}
	err = cmd.Wait()
	require.True(t, killed, "no progress line showed a copy:\n%s", errOut.String())
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.NotZero(t, exit.ExitCode())
	require.Contains(t, errOut.String(), "source memcached "+mc.Addr)
	require.Contains(t, out.String(), "import STOPPED from source memcached "+mc.Addr)
}

// TestExportImportRoundTrip: kvd export writes every item of one kvd,
// and kvd import --from-file puts them into another, value, flags and
// expiry alike.
func TestExportImportRoundTrip(t *testing.T) {
	from := kvdproc.Start(t, t.TempDir())
	items := dataset(5, 3000, 0)
	load(t, from.MemcacheAddr, items)
	// One more item, written by an ordinary client.
	c := memcache.New(from.MemcacheAddr)
	require.NoError(t, c.Set(&memcache.Item{Key: "plain:last", Value: []byte("v"), Flags: 9}))
	file := filepath.Join(t.TempDir(), "export.jsonl")
	out, errOut, err := kvdCLI(t, "export", "--from", from.HTTPAddr, "--out", file, "--json")
	require.NoError(t, err, errOut)
	var es migrate.ExportSummary
	require.NoError(t, json.Unmarshal([]byte(out), &es), out)
	require.Equal(t, uint64(3001), es.Items)
	require.NoFileExists(t, file+".part")
	head, err := os.ReadFile(file)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(head, []byte(`{"format":"kvd-export","version":1,`)), "%.100s", head)

	to := kvdproc.Start(t, t.TempDir())
	out, errOut, err = kvdCLI(t, "import", "--from-file", file, "--to", to.MemcacheAddr)
	require.NoError(t, err, errOut)
	require.Contains(t, out, "3001 copied, 0 expired meanwhile, 0 missing meanwhile (deleted), 0 failed of 3001 listed")
	require.Contains(t, out, "verify: 3001 checked, 0 mismatched")
	items["plain:last"] = want{value: []byte("v"), flags: 9}
	require.Zero(t, checkCopied(t, to.MemcacheAddr, items))

	// An export that cannot reach its member fails, and leaves no file.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	_, errOut, err = kvdCLI(t, "export", "--from", "127.0.0.1:1", "--out", bad)
	require.Error(t, err)
	require.Contains(t, errOut, "127.0.0.1:1")
	require.NoFileExists(t, bad)
	require.NoFileExists(t, bad+".part")
}

// TestImportExportSecured: kvd import and kvd export reach a kvd that
// serves TLS only and requires a login, with the same --cacert and --user
// flags as the other kvd commands; a wrong password stops the import at
// its first connection, naming the refusal.
func TestImportExportSecured(t *testing.T) {
	certs := t.TempDir()
	_, errOut, err := kvdCLI(t, "certs", "cluster", "--out", certs, "--members", "n1", "--host", "localhost")
	require.NoError(t, err, errOut)
	htpasswd := filepath.Join(certs, "kvd.htpasswd")
	cmd := exec.Command(kvdproc.Binary(t), "certs", "htpasswd", "--file", htpasswd, "--user", "app", "--password-stdin")
	cmd.Stdin = strings.NewReader("s3cret\n")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	crt, key, ca := filepath.Join(certs, "n1.crt"), filepath.Join(certs, "n1.key"), filepath.Join(certs, "ca.crt")
	kvd := kvdproc.Start(t, t.TempDir(), "--cert-file", crt, "--key-file", key, "--auth-file", htpasswd)

	mc := startMemcached(t)
	items := dataset(5, 500, 0)
	load(t, mc.Addr, items)
	to := strings.Replace(kvd.MemcacheAddr, "127.0.0.1", "localhost", 1)
	stdout, errOut, err := kvdCLI(t, "import", "--from-memcached", mc.Addr, "--to", to, "--json",
		"--cacert", ca, "--user", "app:s3cret")
	require.NoError(t, err, errOut)
	var sum migrate.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &sum), stdout)
	require.True(t, sum.Complete)
	require.Equal(t, uint64(500), sum.Copied)
	require.Equal(t, uint64(500), sum.VerifyChecked, "the verify pass read every item back over TLS, logged in")
	require.Zero(t, sum.Mismatches)

	_, errOut, err = kvdCLI(t, "import", "--from-memcached", mc.Addr, "--to", to, "--cacert", ca, "--user", "app:wrong")
	require.Error(t, err)
	require.Contains(t, errOut, "authentication as \"app\" refused")
	_, _, err = kvdCLI(t, "import", "--from-memcached", mc.Addr, "--to", to, "--user", "app:s3cret")
	require.Error(t, err, "plain text to a TLS-only port")

	// A kvd without logins would take the login for a write of "auth".
	plain := kvdproc.Start(t, t.TempDir())
	_, errOut, err = kvdCLI(t, "import", "--from-memcached", mc.Addr, "--to", plain.MemcacheAddr, "--user", "app:s3cret")
	require.Error(t, err)
	require.Contains(t, errOut, "requires no login")

	file := filepath.Join(t.TempDir(), "export.jsonl")
	from := strings.Replace(kvd.HTTPAddr, "127.0.0.1", "localhost", 1)
	stdout, errOut, err = kvdCLI(t, "export", "--from", from, "--out", file, "--json", "--cacert", ca, "--user", "app:s3cret")
	require.NoError(t, err, errOut)
	var exp migrate.ExportSummary
	require.NoError(t, json.Unmarshal([]byte(stdout), &exp), stdout)
	require.Equal(t, uint64(500), exp.Items)
	_, errOut, err = kvdCLI(t, "export", "--from", from, "--out", file+".2", "--cacert", ca)
	require.Error(t, err, "an export without credentials")
	require.Contains(t, errOut, "401")
}
