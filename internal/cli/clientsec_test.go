package cli

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/testing/testcerts"
)

// The TLS flags: a certificate needs its key and the other way round; a
// CA file must hold a certificate; no flag, no TLS.
func TestClientSecurityTLSFlags(t *testing.T) {
	files := testcerts.New(t)
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	for _, tc := range []struct {
		name    string
		sec     clientSecurity
		wantErr string
		wantTLS bool
		certs   int
	}{
		{name: "none", sec: clientSecurity{}},
		{name: "cacert", sec: clientSecurity{caFile: files.CA}, wantTLS: true},
		{name: "cert and key", sec: clientSecurity{caFile: files.CA, certFile: files.Cert, keyFile: files.Key}, wantTLS: true, certs: 1},
		{name: "tls alone: system roots", sec: clientSecurity{forceTLS: true}, wantTLS: true},
		{name: "cert without key", sec: clientSecurity{certFile: files.Cert}, wantErr: "--cert: needs --key"},
		{name: "key without cert", sec: clientSecurity{keyFile: files.Key}, wantErr: "--key: needs --cert"},
		{name: "key of another certificate", sec: clientSecurity{certFile: files.CA, keyFile: files.Key}, wantErr: "--cert/--key"},
		{name: "missing cacert", sec: clientSecurity{caFile: filepath.Join(t.TempDir(), "nope.crt")}, wantErr: "--cacert: open"},
		{name: "cacert not PEM", sec: clientSecurity{caFile: notPEM}, wantErr: "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc2, err := tc.sec.tlsConfig()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantTLS, tc2 != nil)
			if tc2 != nil {
				require.Len(t, tc2.Certificates, tc.certs)
				require.Equal(t, tc.sec.caFile != "", tc2.RootCAs != nil)
			}
		})
	}
}

// --user NAME:PASSWORD carries its password; NAME alone takes it from
// KVD_PASSWORD, else from the terminal, else fails saying how to give it.
func TestClientSecurityCredentials(t *testing.T) {
	noTerminal := func(string) (string, error) { return "", errNoTerminal }
	for _, tc := range []struct {
		name, user string
		env        map[string]string
		prompt     func(string) (string, error)
		wantUser   string
		wantPass   string
		wantErr    string
	}{
		{name: "none", user: ""},
		{name: "name and password", user: "alice:s3:cret", wantUser: "alice", wantPass: "s3:cret"},
		{name: "empty password given", user: "alice:", wantUser: "alice", wantPass: ""},
		{name: "password from the environment", user: "alice", env: map[string]string{"KVD_PASSWORD": "s3cret"}, prompt: noTerminal,
			wantUser: "alice", wantPass: "s3cret"},
		{name: "password from the terminal", user: "alice", prompt: func(u string) (string, error) { return "typed-for-" + u, nil },
			wantUser: "alice", wantPass: "typed-for-alice"},
		{name: "nowhere to get it", user: "alice", prompt: noTerminal, wantErr: "--user alice: no password: give NAME:PASSWORD or set KVD_PASSWORD"},
		{name: "empty name", user: ":s3cret", wantErr: "--user: the name is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := clientSecurity{user: tc.user, prompt: tc.prompt,
				lookupEnv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }}
			user, pass, ok, err := s.credentials()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.user != "", ok)
			require.Equal(t, tc.wantUser, user)
			require.Equal(t, tc.wantPass, pass)
		})
	}
}

// tlsAPI is an HTTPS server with the test certificate that answers
// /readyz and /v1/cluster to alice:s3cret, 401 to anyone else.
func tlsAPI(t *testing.T) (*httptest.Server, testcerts.Files) {
	t.Helper()
	files := testcerts.New(t)
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(httpapi.Error{Error: "authentication required", Code: "unauthorized"})
			return
		}
		switch r.URL.Path {
		case "/readyz":
			_, _ = w.Write([]byte(`{"ready":true}`))
		case "/v1/cluster":
			_ = json.NewEncoder(w).Encode(httpapi.ClusterStatus{Self: "1", Leader: "1", Members: []httpapi.ClusterMember{{ID: "1", MemberInfo: httpapi.MemberInfo{Name: "n1"}}}})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, files
}

// kvd healthcheck and kvd cluster reach an HTTPS node with --cacert and
// send --user as Basic credentials; the password may come from
// KVD_PASSWORD. A scheme-less endpoint is https when a TLS flag is given.
func TestHTTPCommandsSpeakTLSWithCredentials(t *testing.T) {
	srv, files := tlsAPI(t)
	hostPort := strings.TrimPrefix(srv.URL, "https://")
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		wantOut string
		wantErr string
	}{
		{name: "healthcheck", args: []string{"healthcheck", "--url", srv.URL + "/readyz", "--cacert", files.CA, "--user", "alice:s3cret"}, wantOut: "ok:"},
		{name: "healthcheck, password from the environment", env: map[string]string{"KVD_PASSWORD": "s3cret"},
			args: []string{"healthcheck", "--url", srv.URL + "/readyz", "--cacert", files.CA, "--user", "alice"}, wantOut: "ok:"},
		{name: "healthcheck, wrong password", args: []string{"healthcheck", "--url", srv.URL + "/readyz", "--cacert", files.CA, "--user", "alice:guess"},
			wantErr: "401 Unauthorized"},
		{name: "healthcheck, CA not trusted", args: []string{"healthcheck", "--url", srv.URL + "/readyz", "--user", "alice:s3cret"},
			wantErr: "certificate"},
		{name: "cluster status", args: []string{"cluster", "status", "--endpoints", hostPort, "--cacert", files.CA, "--user", "alice:s3cret"},
			wantOut: "n1"},
		{name: "cluster status from the environment", env: map[string]string{"KVD_ENDPOINTS": srv.URL, "KVD_CACERT": files.CA, "KVD_USER": "alice:s3cret"},
			args: []string{"cluster", "status"}, wantOut: "n1"},
		{name: "cluster status, no credentials", args: []string{"cluster", "status", "--endpoints", hostPort, "--cacert", files.CA},
			wantErr: "authentication required"},
		{name: "cluster, cert without key", args: []string{"cluster", "status", "--endpoints", hostPort, "--cert", files.Cert},
			wantErr: "--cert: needs --key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			out, _, err := runArgs(t, tc.args...)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Contains(t, out, tc.wantOut)
		})
	}
}

// kvd bench refuses bad TLS flags with the flag's name, before any dial,
// along with every other problem.
func TestBenchValidatesClientSecurityFlags(t *testing.T) {
	_, _, err := runArgs(t, "bench", "--servers", "127.0.0.1:1", "--cert", "x.crt", "--concurrency", "0")
	require.ErrorContains(t, err, "--cert: needs --key")
	require.ErrorContains(t, err, "--concurrency")
	_, _, err = runArgs(t, "bench", "--target", "etcd", "--servers", "127.0.0.1:1", "--user", "a:b")
	require.ErrorContains(t, err, "not supported with --target etcd")
}

// Credentials in an endpoint's URL are sent (net/http does) but never
// printed: not in errors, not in the join command kvd cluster add prints.
func TestClusterEndpointCredentialsAreNotPrinted(t *testing.T) {
	srv, files := tlsAPI(t)
	hostPort := strings.TrimPrefix(srv.URL, "https://")
	_, _, err := runArgs(t, "cluster", "status", "--cacert", files.CA, "--endpoints", "https://alice:guess@"+hostPort)
	require.ErrorContains(t, err, "401 Unauthorized")
	_, _, err = runArgs(t, "cluster", "remove", "n9", "--cacert", files.CA, "--endpoints", "https://alice:guess@127.0.0.1:1")
	require.ErrorContains(t, err, "alice:xxxxx@")
	require.NotContains(t, err.Error(), "guess")
	out, _, err := runArgs(t, "cluster", "status", "--cacert", files.CA, "--endpoints", "https://alice:s3cret@"+hostPort)
	require.NoError(t, err)
	require.NotContains(t, out, "s3cret")
}

// kvd snapshot save takes the same flags: its request carries --user over
// the --cacert-verified connection (here refused for a wrong password,
// which the save reports).
func TestSnapshotSaveSendsCredentials(t *testing.T) {
	srv, files := tlsAPI(t)
	file := filepath.Join(t.TempDir(), "b.kvdsnap")
	_, _, err := runArgs(t, "snapshot", "save", file, "--endpoints", srv.URL, "--cacert", files.CA, "--user", "alice:guess")
	require.ErrorContains(t, err, "authentication required")
	// Right credentials pass the check; the fake has no /v1/snapshot.
	_, _, err = runArgs(t, "snapshot", "save", file, "--endpoints", srv.URL, "--cacert", files.CA, "--user", "alice:s3cret")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "authentication required")
	require.NoFileExists(t, file)
}

// TestCredentialsStayOnTheirHost: --user credentials go with every request
// the command makes and with a redirect on the same host, never with a
// redirect to another host (which net/http would otherwise be told to
// send them to by the transport that adds them).
func TestCredentialsStayOnTheirHost(t *testing.T) {
	seen := map[string]string{} // path -> Authorization header
	record := func(w http.ResponseWriter, r *http.Request) { seen[r.Host+r.URL.Path] = r.Header.Get("Authorization") }
	other := httptest.NewServer(http.HandlerFunc(record))
	defer other.Close()
	var self *httptest.Server
	self = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/here":
			http.Redirect(w, r, self.URL+"/landed", http.StatusTemporaryRedirect)
		case "/away":
			http.Redirect(w, r, other.URL+"/landed", http.StatusTemporaryRedirect)
		default:
			record(w, r)
		}
	}))
	defer self.Close()

	c := httpAuth{client: &http.Client{}, user: "app", password: "s3cret"}.asClient()
	for _, path := range []string{"/direct", "/here", "/away"} {
		resp, err := c.Get(self.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
	}
	selfHost, otherHost := strings.TrimPrefix(self.URL, "http://"), strings.TrimPrefix(other.URL, "http://")
	require.NotEmpty(t, seen[selfHost+"/direct"], "a request the command makes carries the credentials")
	require.NotEmpty(t, seen[selfHost+"/landed"], "a redirect on the same host keeps them")
	require.Contains(t, seen, otherHost+"/landed")
	require.Empty(t, seen[otherHost+"/landed"], "a redirect to another host must not carry them")
}
