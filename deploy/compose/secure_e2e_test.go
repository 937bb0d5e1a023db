//go:build e2e

package compose_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var secureNodes = topology{file: "docker-compose.secure.yml", tag: "s", secure: true, members: []member{
	{service: "kvd1", env: "KVD1"}, {service: "kvd2", env: "KVD2"}, {service: "kvd3", env: "KVD3"}}}

// TestComposeSecure: docker-compose.secure.yml's cluster (TLS on every
// client port, mutual TLS between members, an htpasswd user) serves a
// client that trusts its CA and knows the password on every node, and
// nothing to a client without them: a plaintext client gets no reply, a TLS
// client without credentials is refused on get, a wrong password or an
// unknown user is refused, HTTPS without credentials is 401. Then the leader
// is SIGKILLed under authenticated TLS writes: writes go on through the
// other two, and every acknowledged write reads back at the end.
func TestComposeSecure(t *testing.T) {
	c := startCluster(t, secureNodes)
	values := c.secureClients(t)
	c.secureRefusals(t, values)
	c.secureHTTP(t, values)

	w := startWriters(t, c)
	defer w.stop()
	w.waitSuccesses(t, 50, 30*time.Second)
	t.Logf("baseline: %d acknowledged writes over TLS with credentials", w.acked())
	c.killLeader(t, w)
	w.stop()
	t.Logf("writers stopped: %d acknowledged writes, %d failed (outcome unknown or refused)", w.acked(), w.unknown())
	c.verifyAcked(t, w.ackedWrites())
}

// security is what a client of a secure cluster holds: the CA, copied out
// of the certificates volume, and the user the htpasswd init service adds.
type security struct {
	dir            string
	user, password string
	tls            *tls.Config
}

// newSecurity makes this run's password: the compose file has none of its
// own and refuses to start without one.
func newSecurity(t *testing.T) *security {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("password: %v", err)
	}
	return &security{dir: t.TempDir(), user: "e2e", password: hex.EncodeToString(b)}
}

// env is what the compose file reads the user and password from.
func (s *security) env() []string {
	return []string{"KVD_SECURE_USER=" + s.user, "KVD_SECURE_PASSWORD=" + s.password}
}

// trustCA copies ca.crt out of the certs init service's container, as the
// README tells an operator to, and makes c's HTTP client trust it.
func (s *security) trustCA(t *testing.T, c *cluster) {
	t.Helper()
	path := filepath.Join(s.dir, "ca.crt")
	docker(t, "cp", c.containerOf(t, "certs")+":/data/ca.crt", path)
	pem, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("ca.crt: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("ca.crt copied from the certs volume holds no certificate")
	}
	// The published ports are dialled as 127.0.0.1; the member
	// certificates name localhost (and 127.0.0.1), from --host=localhost.
	s.tls = &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	c.httpc = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: s.tls}}
}

// authExchange is memcached's text-protocol authentication: a set whose
// data is "user password" (the key is ignored).
func authExchange(user, password string) string {
	data := user + " " + password
	return fmt.Sprintf("set auth 0 0 %d\r\n%s\r\n", len(data), data)
}

// textConn is one memcache text connection, answered a line at a time.
type textConn struct {
	net.Conn
	r *bufio.Reader
}

// roundTrip sends req and returns the first reply line.
func (m *textConn) roundTrip(req string) (string, error) {
	if err := m.SetDeadline(time.Now().Add(requestTimeout + 3*time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(m, req); err != nil {
		return "", err
	}
	line, err := m.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// dialTLS opens a TLS memcache connection, without authenticating.
func (s *security) dialTLS(ctx context.Context, addr string) (*textConn, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: s.tls}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &textConn{Conn: conn, r: bufio.NewReader(conn)}, nil
}

// login dials addr over TLS and authenticates as user with password.
func (s *security) login(ctx context.Context, addr, user, password string) (*textConn, string, error) {
	m, err := s.dialTLS(ctx, addr)
	if err != nil {
		return nil, "", err
	}
	line, err := m.roundTrip(authExchange(user, password))
	if err != nil {
		m.Close()
		return nil, line, err
	}
	return m, line, nil
}

// dialAuthed is a gomemcache DialContext: a TLS connection authenticated
// as the test's user before the library sends anything on it. The reply
// is one line, so nothing the library needs stays in the reader.
func (s *security) dialAuthed(ctx context.Context, _, addr string) (net.Conn, error) {
	m, line, err := s.login(ctx, addr, s.user, s.password)
	if err != nil {
		return nil, fmt.Errorf("authenticate to %s: %w", addr, err)
	}
	if line != "STORED" {
		m.Close()
		return nil, fmt.Errorf("authenticate to %s: %q", addr, line)
	}
	if err := m.SetDeadline(time.Time{}); err != nil {
		m.Close()
		return nil, err
	}
	return m.Conn, nil
}

// secureClients: on every node a TLS client with the credentials sets a key
// and reads it back on its own connection; then a library client reads
// every node's key from every node. It returns the keys and values.
func (c *cluster) secureClients(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	values := map[string]string{}
	for _, i := range c.data() {
		m, line, err := c.sec.login(ctx, c.memcache[i], c.sec.user, c.sec.password)
		if err != nil || line != "STORED" {
			t.Fatalf("clients: %s: TLS login as %s: %q, %v; want STORED", c.service(i), c.sec.user, line, err)
		}
		key, value := "e2e-sec-"+c.service(i), fmt.Sprintf("secret-of-%s-%d", c.service(i), time.Now().UnixNano())
		if line, err := m.roundTrip(fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, len(value), value)); err != nil || line != "STORED" {
			t.Fatalf("clients: %s: set %s: %q, %v; want STORED", c.service(i), key, line, err)
		}
		line, err = m.roundTrip("get " + key + "\r\n")
		data, _ := m.r.ReadString('\n')
		end, _ := m.r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "VALUE "+key+" ") || strings.TrimRight(data, "\r\n") != value || end != "END\r\n" {
			t.Fatalf("clients: %s: get %s: %q %q %q, %v; want VALUE, %q, END", c.service(i), key, line, data, end, err, value)
		}
		m.Close()
		values[key] = value
	}
	for _, i := range c.data() {
		if err := checkValues(c.mcClient(i), values); err != nil {
			t.Fatalf("clients: %s: gomemcache over TLS with credentials: %v", c.service(i), err)
		}
	}
	t.Logf("clients: TLS + credentials: set and get on each of %d nodes, every key read back from every node", len(c.data()))
	return values
}

// secureRefusals: without TLS, without credentials, with the wrong ones,
// no node gives anything away.
func (c *cluster) secureRefusals(t *testing.T, values map[string]string) {
	t.Helper()
	ctx := context.Background()
	var key string
	for k := range values {
		key = k
	}
	leaks := func(s string) bool {
		for _, v := range values {
			if strings.Contains(s, v) {
				return true
			}
		}
		return strings.Contains(s, "VALUE ")
	}
	for _, i := range c.data() {
		svc := c.service(i)
		// Plaintext on a TLS-only port: the server reads a TLS handshake
		// that never comes and closes; whatever it sends is no reply.
		got, err := plaintextGet(c.memcache[i], key)
		if leaks(got) || strings.Contains(got, "END") {
			t.Errorf("refusals: %s: plaintext get %s answered %q", svc, key, got)
		} else {
			t.Logf("refusals: %s: plaintext client: %d bytes, no reply (%v)", svc, len(got), err)
		}

		// TLS without credentials: everything but logging in is refused.
		m, err := c.sec.dialTLS(ctx, c.memcache[i])
		if err != nil {
			t.Fatalf("refusals: %s: TLS dial: %v", svc, err)
		}
		line, err := m.roundTrip("get " + key + "\r\n")
		m.Close()
		if err != nil || line != "CLIENT_ERROR unauthenticated" {
			t.Errorf("refusals: %s: get without credentials: %q, %v; want CLIENT_ERROR unauthenticated", svc, line, err)
		}

		// A wrong password and an unknown user: not STORED, and the
		// connection stays unauthenticated (or is closed).
		for _, cred := range []struct{ what, user, password string }{
			{"wrong password", c.sec.user, c.sec.password + "x"},
			{"unknown user", "nobody", c.sec.password},
		} {
			m, line, err := c.sec.login(ctx, c.memcache[i], cred.user, cred.password)
			if line == "STORED" {
				t.Errorf("refusals: %s: %s: login answered STORED", svc, cred.what)
			}
			if err != nil {
				t.Logf("refusals: %s: %s: %q, connection closed (%v)", svc, cred.what, line, err)
				continue
			}
			after, err := m.roundTrip("get " + key + "\r\n")
			m.Close()
			if leaks(after) || (err == nil && !strings.HasPrefix(after, "CLIENT_ERROR")) {
				t.Errorf("refusals: %s: %s: login %q, then get %s answered %q", svc, cred.what, line, key, after)
			} else {
				t.Logf("refusals: %s: %s: %q, then get: %q %v", svc, cred.what, line, after, err)
			}
		}
	}
}

// plaintextGet sends a plaintext get to a TLS port and returns whatever
// comes back before the server closes or three seconds pass.
func plaintextGet(addr, key string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(conn, "get "+key+"\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(conn, 4096))
	if err == nil {
		err = errors.New("closed by the server")
	}
	return string(b), err
}

// secureHTTP: /v1/kv over HTTPS is 401 without credentials (and with a
// wrong password), and serves the value with them; plain HTTP on the TLS
// port serves nothing.
func (c *cluster) secureHTTP(t *testing.T, values map[string]string) {
	t.Helper()
	get := func(url, user, password string) (int, string, error) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := c.httpc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b), err
	}
	for _, i := range c.data() {
		svc := c.service(i)
		for key, value := range values {
			url := c.url(i, "/v1/kv/"+key)
			if code, body, err := get(url, "", ""); err != nil || code != http.StatusUnauthorized || strings.Contains(body, value) {
				t.Errorf("http: %s: GET %s without credentials: %d %q, %v; want 401", svc, url, code, body, err)
			}
			if code, body, err := get(url, c.sec.user, c.sec.password+"x"); err != nil || code != http.StatusUnauthorized || strings.Contains(body, value) {
				t.Errorf("http: %s: GET %s with a wrong password: %d %q, %v; want 401", svc, url, code, body, err)
			}
			if code, body, err := get(url, c.sec.user, c.sec.password); err != nil || code != http.StatusOK || body != value {
				t.Errorf("http: %s: GET %s with credentials: %d %q, %v; want 200 %q", svc, url, code, body, err, value)
			}
			plain := "http://" + c.http[i] + "/v1/kv/" + key
			if code, body, err := get(plain, c.sec.user, c.sec.password); err == nil && (code == http.StatusOK || strings.Contains(body, value)) {
				t.Errorf("http: %s: plain GET %s: %d %q; want no answer over plaintext", svc, plain, code, body)
			}
		}
	}
	t.Logf("http: /v1/kv over HTTPS: 401 without credentials or with a wrong password, 200 with them, on %d nodes; plain HTTP refused", len(c.data()))
}
