package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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

	"github.com/kvd-project/kvd/internal/certgen"
)

// runArgsIn is runArgs with stdin.
func runArgsIn(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cert, err := certgen.ParseCertificate(data)
	require.NoError(t, err)
	return cert
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	return info.Mode().Perm()
}

func makeCA(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	_, _, err := runArgs(t, "certs", "ca", "--out", dir)
	require.NoError(t, err)
	return dir
}

func TestCertsCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "made", "by", "kvd")
	out, _, err := runArgs(t, "certs", "ca", "--out", dir, "--name", "test CA", "--days", "30")
	require.NoError(t, err)
	crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	assert.Equal(t, "wrote "+crt+"\nwrote "+key+"\n", out)
	assert.Equal(t, os.FileMode(0o600), fileMode(t, key))
	assert.Equal(t, os.FileMode(0o644), fileMode(t, crt))
	ca := readCert(t, crt)
	assert.True(t, ca.IsCA)
	assert.Equal(t, "test CA", ca.Subject.CommonName)
	assert.WithinDuration(t, time.Now().Add(30*24*time.Hour), ca.NotAfter, time.Minute)

	// Not replaced without --force: every certificate it signed hangs on it.
	_, _, err = runArgs(t, "certs", "ca", "--out", dir)
	require.ErrorContains(t, err, "already exists")
	assert.Equal(t, ca.SerialNumber, readCert(t, crt).SerialNumber)

	_, _, err = runArgs(t, "certs", "ca", "--out", dir, "--force")
	require.NoError(t, err)
	assert.NotEqual(t, ca.SerialNumber, readCert(t, crt).SerialNumber)
}

func TestCertsMemberNamesAndAddresses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantDNS []string
		wantIPs []string
	}{
		{"name only", nil, []string{"n1"}, []string{}},
		{"hosts", []string{"--host", "n1.example.net,kvd.example.net"}, []string{"n1", "n1.example.net", "kvd.example.net"}, []string{}},
		{"localhost adds 127.0.0.1", []string{"--host", "localhost"}, []string{"n1", "localhost"}, []string{"127.0.0.1"}},
		{"ips", []string{"--ip", "10.0.0.1", "--ip", "fd00::1"}, []string{"n1"}, []string{"10.0.0.1", "fd00::1"}},
		{"an IP given as a host is an IP SAN", []string{"--host", "10.0.0.2"}, []string{"n1"}, []string{"10.0.0.2"}},
		{"duplicates once", []string{"--host", "n1,localhost", "--ip", "127.0.0.1"}, []string{"n1", "localhost"}, []string{"127.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caDir := makeCA(t)
			out := t.TempDir()
			_, _, err := runArgs(t, append([]string{"certs", "member", "n1", "--ca-dir", caDir, "--out", out}, tc.args...)...)
			require.NoError(t, err)
			cert := readCert(t, filepath.Join(out, "n1.crt"))
			assert.Equal(t, "n1", cert.Subject.CommonName)
			assert.Equal(t, tc.wantDNS, cert.DNSNames)
			assert.Equal(t, tc.wantIPs, ipStrings(cert.IPAddresses))
			assert.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, cert.ExtKeyUsage)
			assert.Equal(t, os.FileMode(0o600), fileMode(t, filepath.Join(out, "n1.key")))
		})
	}
}

func TestCertsMemberAndClientDefaults(t *testing.T) {
	caDir := makeCA(t)
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	require.NoError(t, err)

	// --out defaults to --ca-dir.
	out, _, err := runArgs(t, "certs", "client", "app", "--ca-dir", caDir)
	require.NoError(t, err)
	assert.Contains(t, out, filepath.Join(caDir, "app.crt"))
	certPEM, err := os.ReadFile(filepath.Join(caDir, "app.crt"))
	require.NoError(t, err)
	require.NoError(t, certgen.Verify(caPEM, certPEM, certgen.UsageClient, time.Now()))
	require.Error(t, certgen.Verify(caPEM, certPEM, certgen.UsageServer, time.Now()), "a client certificate is not a server's")
	assert.Empty(t, readCert(t, filepath.Join(caDir, "app.crt")).DNSNames)

	_, _, err = runArgs(t, "certs", "member", "n1", "--ca-dir", caDir, "--days", "10")
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(10*24*time.Hour), readCert(t, filepath.Join(caDir, "n1.crt")).NotAfter, time.Minute)
	_, _, err = runArgs(t, "certs", "member", "n1", "--ca-dir", caDir)
	require.ErrorContains(t, err, "already exists")
	_, _, err = runArgs(t, "certs", "member", "n1", "--ca-dir", caDir, "--force")
	require.NoError(t, err)
}

func TestCertsErrorsAreClear(t *testing.T) {
	caDir := makeCA(t)
	garbageKey := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(garbageKey, "ca.crt"), mustRead(t, filepath.Join(caDir, "ca.crt")), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(garbageKey, "ca.key"), []byte("not a key"), 0o600))
	unreadableKey := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(unreadableKey, "ca.crt"), mustRead(t, filepath.Join(caDir, "ca.crt")), 0o644))
	// A directory where the key should be: unreadable even to root.
	require.NoError(t, os.Mkdir(filepath.Join(unreadableKey, "ca.key"), 0o700))
	empty := t.TempDir()

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing CA", []string{"member", "n1", "--ca-dir", empty}, []string{"no CA in " + empty, "kvd certs ca --out " + empty}},
		{"garbage CA key", []string{"member", "n1", "--ca-dir", garbageKey}, []string{filepath.Join(garbageKey, "ca.key"), "no PEM private key"}},
		{"unreadable CA key", []string{"client", "app", "--ca-dir", unreadableKey}, []string{"read key", filepath.Join(unreadableKey, "ca.key")}},
		{"name with a space", []string{"member", "n 1", "--ca-dir", caDir}, []string{`member name "n 1"`, "spaces"}},
		{"name with a slash", []string{"client", "../x", "--ca-dir", caDir}, []string{`client name "../x"`, "/"}},
		{"name that is not ASCII", []string{"member", "nœud", "--ca-dir", caDir}, []string{`member name "nœud"`, "ASCII"}},
		{"the CA's name", []string{"member", "ca", "--ca-dir", caDir, "--force"}, []string{`"ca"`, "CA's files"}},
		{"bad --ip", []string{"member", "n1", "--ca-dir", caDir, "--ip", "10.0.0"}, []string{"--ip", "10.0.0"}},
		{"bad --days", []string{"member", "n1", "--ca-dir", caDir, "--days", "0"}, []string{"--days"}},
		{"no --ca-dir", []string{"member", "n1"}, []string{"ca-dir"}},
		{"no name", []string{"member", "--ca-dir", caDir}, []string{"arg"}},
		{"no --out for ca", []string{"ca"}, []string{"out"}},
		{"cluster without members", []string{"cluster", "--out", empty}, []string{"members"}},
		{"cluster with a bad member", []string{"cluster", "--out", empty, "--members", "n1,n=2"}, []string{"--members", `"n=2"`}},
		{"cluster with a duplicate", []string{"cluster", "--out", empty, "--members", "n1,n1"}, []string{"given twice"}},
		{"cluster with a member named client", []string{"cluster", "--out", empty, "--members", "client"}, []string{"client certificate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runArgs(t, append([]string{"certs"}, tc.args...)...)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	assert.Empty(t, entries, "a refused cluster run writes nothing")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

func TestCertsClusterIsIdempotent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var first certsReport
	out, _, err := runArgs(t, "certs", "--json", "cluster", "--out", dir, "--members", "n1,n2,n3", "--host", "kvd.example.net")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &first))
	var want []string
	for _, base := range []string{"ca", "n1", "n2", "n3", "client"} {
		want = append(want, filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key"))
	}
	assert.Equal(t, want, first.Wrote)
	assert.Empty(t, first.Kept)

	caPEM := mustRead(t, filepath.Join(dir, "ca.crt"))
	for _, n := range []string{"n1", "n2", "n3"} {
		cert := readCert(t, filepath.Join(dir, n+".crt"))
		assert.Equal(t, n, cert.Subject.CommonName)
		assert.Equal(t, []string{n, "localhost", "kvd.example.net"}, cert.DNSNames)
		assert.Equal(t, []string{"127.0.0.1"}, ipStrings(cert.IPAddresses))
		require.NoError(t, certgen.Verify(caPEM, mustRead(t, filepath.Join(dir, n+".crt")), certgen.UsageBoth, time.Now()))
	}
	require.NoError(t, certgen.Verify(caPEM, mustRead(t, filepath.Join(dir, "client.crt")), certgen.UsageClient, time.Now()))
	n1 := mustRead(t, filepath.Join(dir, "n1.crt"))

	// Again, with a fourth member: only its files are new.
	out, _, err = runArgs(t, "certs", "cluster", "--out", dir, "--members", "n1,n2,n3,n4")
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(out, "wrote "), out)
	assert.Contains(t, out, "wrote "+filepath.Join(dir, "n4.crt"))
	assert.Contains(t, out, "kept "+filepath.Join(dir, "ca.crt"))
	assert.Equal(t, caPEM, mustRead(t, filepath.Join(dir, "ca.crt")))
	assert.Equal(t, n1, mustRead(t, filepath.Join(dir, "n1.crt")))
	require.NoError(t, certgen.Verify(caPEM, mustRead(t, filepath.Join(dir, "n4.crt")), certgen.UsageBoth, time.Now()))

	// And again: nothing to do.
	out, _, err = runArgs(t, "certs", "cluster", "--out", dir, "--members", "n1,n2,n3,n4")
	require.NoError(t, err)
	assert.NotContains(t, out, "wrote ")
}

func TestCertsClusterRefusesWhatItCannotKeep(t *testing.T) {
	other := makeCA(t)
	_, _, err := runArgs(t, "certs", "member", "n1", "--ca-dir", other)
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, dir string)
		want  string
	}{
		{"a certificate from another CA", func(t *testing.T, dir string) {
			for _, ext := range []string{".crt", ".key"} {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "n1"+ext), mustRead(t, filepath.Join(other, "n1"+ext)), 0o600))
			}
		}, "n1.crt cannot be kept"},
		{"a key that is not the certificate's", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "n1.key"), mustRead(t, filepath.Join(dir, "n2.key")), 0o600))
		}, "n1.key"},
		{"a certificate without its key", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "n1.key")))
		}, "exists without"},
		{"a CA key without its certificate", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "ca.crt")))
		}, "ca.key exists without"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, _, err := runArgs(t, "certs", "cluster", "--out", dir, "--members", "n1,n2")
			require.NoError(t, err)
			tc.spoil(t, dir)
			_, _, err = runArgs(t, "certs", "cluster", "--out", dir, "--members", "n1,n2")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The member certificates work as kvd uses them: n1 serves, n2 dials with its
// own certificate, each verifies the other against the CA and finds the
// other's member name in it.
func TestCertsClusterMutualTLSHandshake(t *testing.T) {
	dir := t.TempDir()
	_, _, err := runArgs(t, "certs", "cluster", "--out", dir, "--members", "n1,n2")
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(mustRead(t, filepath.Join(dir, "ca.crt"))))
	pair := func(name string) tls.Certificate {
		c, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		require.NoError(t, err)
		return c
	}
	serverConn, clientConn := net.Pipe()
	server := tls.Server(serverConn, &tls.Config{
		Certificates: []tls.Certificate{pair("n1")},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	client := tls.Client(clientConn, &tls.Config{
		Certificates: []tls.Certificate{pair("n2")},
		RootCAs:      pool,
		ServerName:   "n1",
		MinVersion:   tls.VersionTLS12,
	})
	errs := make(chan error, 1)
	go func() {
		errs <- server.HandshakeContext(context.Background())
		_, _ = io.Copy(io.Discard, server)
	}()
	require.NoError(t, client.HandshakeContext(context.Background()))
	require.NoError(t, <-errs)
	assert.Equal(t, "n2", server.ConnectionState().PeerCertificates[0].Subject.CommonName)
	assert.Contains(t, server.ConnectionState().PeerCertificates[0].DNSNames, "n2")
	assert.Equal(t, "n1", client.ConnectionState().PeerCertificates[0].Subject.CommonName)
	require.NoError(t, client.Close())
}

func TestCertsHtpasswd(t *testing.T) {
	const password = "correct horse battery staple"
	file := filepath.Join(t.TempDir(), "htpasswd")

	out, errOut, err := runArgsIn(t, password+"\n", "certs", "htpasswd", "--user", "app", "--password-stdin", "--file", file, "--cost", "4")
	require.NoError(t, err)
	assert.Equal(t, "wrote "+file+" (user app added)\n", out)
	t.Setenv("KVD_TEST_PASSWORD", "other password")
	out2, errOut2, err := runArgs(t, "certs", "htpasswd", "--user", "ops", "--password-env", "KVD_TEST_PASSWORD", "--file", file, "--cost", "4")
	require.NoError(t, err)
	assert.Contains(t, out2, "user ops added")
	out3, errOut3, err := runArgsIn(t, "new password\r\n", "certs", "--json", "htpasswd", "--user", "app", "--password-stdin", "--file", file, "--cost", "4")
	require.NoError(t, err)
	assert.JSONEq(t, `{"wrote":["`+file+`"],"user":"app","replaced":true}`, out3)
	for _, s := range []string{out, errOut, out2, errOut2, out3, errOut3} {
		for _, pw := range []string{password, "other password", "new password"} {
			assert.NotContains(t, s, pw)
		}
	}

	lines := strings.Split(strings.TrimSuffix(string(mustRead(t, file)), "\n"), "\n")
	require.Len(t, lines, 2)
	for i, tc := range []struct{ user, password string }{{"app", "new password"}, {"ops", "other password"}} {
		user, hash, ok := strings.Cut(lines[i], ":")
		require.True(t, ok)
		assert.Equal(t, tc.user, user)
		assert.True(t, strings.HasPrefix(hash, "$2"), hash)
		require.NoError(t, bcrypt.CompareHashAndPassword([]byte(hash), []byte(tc.password)))
		cost, err := bcrypt.Cost([]byte(hash))
		require.NoError(t, err)
		assert.Equal(t, 4, cost)
	}
	assert.Equal(t, os.FileMode(0o600), fileMode(t, file))

	// Without --file the line is printed, at the default cost.
	out, _, err = runArgsIn(t, password, "certs", "htpasswd", "--user", "app", "--password-stdin")
	require.NoError(t, err)
	user, hash, _ := strings.Cut(strings.TrimSpace(out), ":")
	assert.Equal(t, "app", user)
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)))
	cost, err := bcrypt.Cost([]byte(hash))
	require.NoError(t, err)
	assert.Equal(t, 10, cost)
}

func TestCertsHtpasswdErrors(t *testing.T) {
	const password = "Secret-Password"
	t.Setenv("KVD_TEST_EMPTY", "")
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"no password source", password, []string{"--user", "u"}, "password-stdin password-env"},
		{"both password sources", password, []string{"--user", "u", "--password-stdin", "--password-env", "X"}, "password-stdin password-env"},
		{"no user", password, []string{"--password-stdin"}, "user"},
		{"user with a colon", password, []string{"--user", "a:b", "--password-stdin"}, "':'"},
		{"user with a space", password, []string{"--user", "a b", "--password-stdin"}, "spaces"},
		{"empty stdin", "", []string{"--user", "u", "--password-stdin"}, "no password"},
		{"unset variable", "", []string{"--user", "u", "--password-env", "KVD_TEST_UNSET_VARIABLE"}, "KVD_TEST_UNSET_VARIABLE is not set"},
		{"empty variable", "", []string{"--user", "u", "--password-env", "KVD_TEST_EMPTY"}, "KVD_TEST_EMPTY is empty"},
		{"too long for bcrypt", strings.Repeat(password, 5), []string{"--user", "u", "--password-stdin"}, "72 bytes"},
		{"bad cost", password, []string{"--user", "u", "--password-stdin", "--cost", "3"}, "cost"},
		{"file in a missing directory", password, []string{"--user", "u", "--password-stdin", "--cost", "4", "--file", "/nonexistent-dir/htpasswd"}, "nonexistent-dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runArgsIn(t, tc.stdin, append([]string{"certs", "htpasswd"}, tc.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			for _, s := range []string{err.Error(), out, errOut} {
				assert.NotContains(t, s, password)
			}
		})
	}
}

// kvd --help lists the command, so the root help stays accurate.
func TestRootHelpListsCerts(t *testing.T) {
	out, _, err := runArgs(t, "--help")
	require.NoError(t, err)
	assert.Contains(t, out, "certs")
	out, _, err = runArgs(t, "certs", "--help")
	require.NoError(t, err)
	for _, s := range []string{"Examples:", "kvd certs ca --out", "kvd certs member n3", "kvd certs cluster --out", "kvd certs htpasswd", "--peer-cert-file certs/n1.crt"} {
		assert.Contains(t, out, s)
	}
}
