package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/kvd-project/kvd/internal/certgen"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// pki is a test's certificates and credentials, laid out as `kvd certs
// cluster` lays them out (kvdproc finds ca.crt and client.crt beside a
// node's --cert-file).
type pki struct {
	dir            string
	caCert, caKey  []byte
	user, password string
}

const (
	secUser     = "app"
	secPassword = "correct horse battery staple"
)

func newPKI(t *testing.T, members ...string) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), user: secUser, password: secPassword}
	var err error
	p.caCert, p.caKey, err = certgen.NewCA("kvd test CA", 24*time.Hour)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(p.dir, "ca.crt"), p.caCert, 0o644))
	for _, m := range members {
		p.issue(t, m)
	}
	cert, key, err := certgen.Issue(p.caCert, p.caKey, certgen.Request{CommonName: "client", ValidFor: time.Hour, Usage: certgen.UsageClient})
	require.NoError(t, err)
	p.write(t, "client", cert, key)
	// bcrypt's minimum cost keeps the test quick; the cost is the file's
	// business, not the server's.
	hash, err := bcrypt.GenerateFromPassword([]byte(p.password), bcrypt.MinCost)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p.authFile(), []byte("# test users\n"+p.user+":"+string(hash)+"\n"), 0o600))
	return p
}

// issue writes (or replaces, atomically) member's certificate and key: the
// member name and localhost as DNS names, 127.0.0.1 as IP.
func (p *pki) issue(t *testing.T, member string) *x509.Certificate {
	t.Helper()
	cert, key, err := certgen.Issue(p.caCert, p.caKey, certgen.Request{CommonName: member,
		DNSNames: []string{member, "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		ValidFor: time.Hour, Usage: certgen.UsageBoth})
	require.NoError(t, err)
	p.write(t, member, cert, key)
	parsed, err := certgen.ParseCertificate(cert)
	require.NoError(t, err)
	return parsed
}

// write replaces name.crt and name.key each by a rename, key first: a
// reload that reads between the two sees a mismatched pair, fails, and
// keeps the current one until the next poll.
func (p *pki) write(t *testing.T, name string, cert, key []byte) {
	t.Helper()
	for _, f := range []struct {
		ext  string
		data []byte
	}{{".key", key}, {".crt", cert}} {
		tmp := filepath.Join(p.dir, name+f.ext+".tmp")
		require.NoError(t, os.WriteFile(tmp, f.data, 0o600))
		require.NoError(t, os.Rename(tmp, filepath.Join(p.dir, name+f.ext)))
	}
}

func (p *pki) authFile() string { return filepath.Join(p.dir, "kvd.htpasswd") }

// flags are a member's TLS, mutual TLS and authentication flags.
func (p *pki) flags(member string) []string {
	crt, key := filepath.Join(p.dir, member+".crt"), filepath.Join(p.dir, member+".key")
	return []string{"--cert-file", crt, "--key-file", key,
		"--peer-cert-file", crt, "--peer-key-file", key, "--peer-trusted-ca-file", filepath.Join(p.dir, "ca.crt"),
		"--auth-file", p.authFile()}
}

func (p *pki) clientTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caCert)
	return &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// mcConn is a memcache text connection for the test.
type mcConn struct {
	c  net.Conn
	rw *bufio.ReadWriter
}

func (m *mcConn) roundTrip(t *testing.T, req string) string {
	t.Helper()
	require.NoError(t, m.c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := m.rw.WriteString(req)
	require.NoError(t, err)
	require.NoError(t, m.rw.Flush())
	line, err := m.rw.ReadString('\n')
	require.NoError(t, err, "reply to %q", req)
	return strings.TrimRight(line, "\r\n")
}

// dialTLS opens a TLS memcache connection to addr, without authenticating.
func (p *pki) dialTLS(t *testing.T, addr string) *mcConn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, p.clientTLS())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &mcConn{c: c, rw: bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))}
}

// authExchange is memcached's text-protocol authentication: a set whose
// data is "user password".
func authExchange(user, password string) string {
	data := user + " " + password
	return fmt.Sprintf("set auth 0 0 %d\r\n%s\r\n", len(data), data)
}

// dialAuthed is dialTLS, then the authentication exchange.
func (p *pki) dialAuthed(t *testing.T, addr string) *mcConn {
	t.Helper()
	m := p.dialTLS(t, addr)
	require.Equal(t, "STORED", m.roundTrip(t, authExchange(p.user, p.password)))
	return m
}

// gomemcache is a memcache client library with a TLS dialer that
// authenticates each connection before the library uses it.
func (p *pki) gomemcache(addr string) *memcache.Client {
	c := memcache.New(addr)
	c.Timeout = 5 * time.Second
	c.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		d := tls.Dialer{Config: p.clientTLS()}
		conn, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, authExchange(p.user, p.password)); err != nil {
			conn.Close()
			return nil, err
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || line != "STORED\r\n" {
			conn.Close()
			return nil, fmt.Errorf("authenticate: %q %v", line, err)
		}
		_ = conn.SetDeadline(time.Time{})
		return conn, nil
	}
	return c
}

// httpsGet GETs path on p with the test client (TLS with the CA), with
// credentials when user is not empty.
func httpsGet(t *testing.T, p *kvdproc.Proc, path, user, password string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.URL(path), nil)
	require.NoError(t, err)
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := p.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// secureLeader is the index of the member the others follow, read from GET
// /v1/cluster over HTTPS (open without credentials).
func secureLeader(t *testing.T, procs []*kvdproc.Proc) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for i, p := range procs {
			if p == nil {
				continue
			}
			status, body := httpsGet(t, p, "/v1/cluster", "", "")
			var cs httpapi.ClusterStatus
			if status == http.StatusOK && json.Unmarshal(body, &cs) == nil && cs.HasLeader && cs.Leader == cs.Self {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no leader within 15s")
	return -1
}

// TestSecureCluster: three members with TLS on their client ports, mutual
// TLS between them and an auth file. Clients with the CA and the password
// get everything; without them, nothing. Certificates rotate under a
// writer without failing a write; a fourth member joins through HTTPS with
// credentials in the URL, which no log shows.
func TestSecureCluster(t *testing.T) {
	p := newPKI(t, "n1", "n2", "n3", "n4")
	procs := kvdproc.StartClusterEach(t, 3, p.flags)

	// Clients with the CA and the password: every member serves them.
	for i, proc := range procs {
		m := p.dialAuthed(t, proc.MemcacheAddr)
		require.Equal(t, "STORED", m.roundTrip(t, fmt.Sprintf("set k%d 5 0 2\r\nv%d\r\n", i, i)))
	}
	gm := p.gomemcache(procs[2].MemcacheAddr)
	it, err := gm.Get("k0")
	require.NoError(t, err)
	require.Equal(t, "v0", string(it.Value))
	require.Equal(t, uint32(5), it.Flags)
	require.NoError(t, gm.Set(&memcache.Item{Key: "lib", Value: []byte("gomemcache over TLS")}))

	t.Run("refusals", func(t *testing.T) {
		addr := procs[0].MemcacheAddr
		// A plaintext client on the TLS port gets no byte back.
		plain, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		defer plain.Close()
		_, err = io.WriteString(plain, "get k0\r\n")
		require.NoError(t, err)
		require.NoError(t, plain.SetReadDeadline(time.Now().Add(10*time.Second)))
		n, err := plain.Read(make([]byte, 64))
		require.Zero(t, n)
		require.Error(t, err)
		// TLS without authenticating: nothing but the login (memcached
		// refuses even version on the text protocol).
		m := p.dialTLS(t, addr)
		require.Equal(t, "CLIENT_ERROR unauthenticated", m.roundTrip(t, "get k0\r\n"))
		require.Equal(t, "CLIENT_ERROR unauthenticated", m.roundTrip(t, "mg k0 v\r\n"))
		require.Equal(t, "CLIENT_ERROR authentication failure", m.roundTrip(t, authExchange(p.user, "guess")))
		require.Equal(t, "CLIENT_ERROR authentication failure", m.roundTrip(t, authExchange("mallory", p.password)))
		// A client that trusts another CA refuses the server.
		other, _, err := certgen.NewCA("another CA", time.Hour)
		require.NoError(t, err)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(other)
		_, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
		require.Error(t, err)
		// HTTP: the API needs the password; the probes do not.
		status, _ := httpsGet(t, procs[0], "/v1/kv/k0", "", "")
		require.Equal(t, http.StatusUnauthorized, status)
		status, _ = httpsGet(t, procs[0], "/v1/kv/k0", p.user, "guess")
		require.Equal(t, http.StatusUnauthorized, status)
		status, body := httpsGet(t, procs[0], "/v1/kv/k0", p.user, p.password)
		require.Equal(t, http.StatusOK, status, "%s", body)
		require.Equal(t, "v0", string(body))
		status, _ = httpsGet(t, procs[0], "/readyz", "", "")
		require.Equal(t, http.StatusOK, status)
		// Plain HTTP on the HTTPS port is refused.
		resp, err := http.Get("http://" + procs[0].HTTPAddr + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		// Nothing sensitive reached a log.
		for _, proc := range procs {
			require.NotContains(t, proc.Log.String(), "guess")
			require.NotContains(t, proc.Log.String(), p.password)
		}
	})

	t.Run("rotation under load", func(t *testing.T) {
		// A writer on its own connection, and new connections opened all
		// along: none of them may fail while every member's certificate
		// (client-facing and peer alike: the same files) is replaced.
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var writes, failures atomic.Int64
		var firstFailure atomic.Value
		fail := func(err error) {
			failures.Add(1)
			firstFailure.CompareAndSwap(nil, err.Error())
		}
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := p.gomemcache(procs[w].MemcacheAddr)
				for i := 0; ctx.Err() == nil && i < 100_000; i++ {
					if err := c.Set(&memcache.Item{Key: fmt.Sprintf("rot%d-%d", w, i), Value: []byte("x")}); err != nil {
						fail(err)
					}
					writes.Add(1)
				}
			}()
		}
		wg.Add(1)
		go func() { // fresh connections, each authenticating
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 10_000; i++ {
				c := p.gomemcache(procs[i%3].MemcacheAddr)
				if _, err := c.Get("k0"); err != nil {
					fail(err)
				}
				c.Close()
				time.Sleep(20 * time.Millisecond)
			}
		}()
		time.Sleep(500 * time.Millisecond)
		serials := map[string]*big.Int{}
		for _, proc := range procs {
			serials[proc.Name] = p.issue(t, proc.Name).SerialNumber
			require.NoError(t, syscall.Kill(proc.PID(), syscall.SIGHUP))
		}
		// The listeners present the new certificates to new connections.
		for _, proc := range procs {
			require.Eventually(t, func() bool {
				c, err := tls.Dial("tcp", proc.MemcacheAddr, p.clientTLS())
				if err != nil {
					return false
				}
				defer c.Close()
				return c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(serials[proc.Name]) == 0
			}, 10*time.Second, 50*time.Millisecond, "%s still presents its old certificate", proc.Name)
		}
		time.Sleep(500 * time.Millisecond)
		cancel()
		wg.Wait()
		t.Logf("rotation: %d writes, %d failures", writes.Load(), failures.Load())
		require.Zero(t, failures.Load(), "first failure: %v", firstFailure.Load())
		require.Positive(t, writes.Load())
		// The peers' new connections use the new certificates: kill the
		// leader, and the other two elect one and go on.
		lead := secureLeader(t, procs)
		procs[lead].Kill()
		rest := []*kvdproc.Proc{procs[(lead+1)%3], procs[(lead+2)%3]}
		m := p.dialAuthed(t, rest[0].MemcacheAddr)
		deadline := time.Now().Add(15 * time.Second)
		for reply := ""; reply != "STORED"; {
			require.True(t, time.Now().Before(deadline), "no write acknowledged after the leader's kill: %q", reply)
			reply = m.roundTrip(t, "set after-kill 0 0 1\r\nx\r\n")
		}
		procs[lead] = procs[lead].Restart()
	})

	t.Run("join with credentials", func(t *testing.T) {
		lead := secureLeader(t, procs)
		join := fmt.Sprintf("https://%s:%s@%s", p.user, strings.ReplaceAll(p.password, " ", "%20"), procs[lead].HTTPAddr)
		n4 := kvdproc.Launch(t, filepath.Join(t.TempDir(), "n4"), "n4",
			append(p.flags("n4"), "--peer-addr", kvdproc.FreeAddr(t), "--join", join)...)
		n4.WaitReady()
		m := p.dialAuthed(t, n4.MemcacheAddr)
		require.Equal(t, "STORED", m.roundTrip(t, "set joined 0 0 1\r\ny\r\n"))
		require.Equal(t, "VALUE k1 5 2", m.roundTrip(t, "get k1\r\n"))
		for _, proc := range append(procs, n4) {
			require.NotContains(t, proc.Log.String(), "horse", "%s logged the password", proc.Name)
		}
	})
}
