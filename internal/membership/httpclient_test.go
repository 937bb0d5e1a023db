package membership

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/testing/testcerts"
	"github.com/kvd-project/kvd/internal/tlsconf"
)

// Without --cert-file members speak plain HTTP.
func TestNewHTTPPlain(t *testing.T) {
	h, err := NewHTTP(config.Default(), nil)
	require.NoError(t, err)
	require.Equal(t, "http", h.Scheme)
	require.Equal(t, "http://h:1/v1/version", h.url("h:1", "/v1/version"))
	require.Equal(t, "http://h:1/x", HTTP{}.url("h:1", "/x"), "the zero value is plain HTTP")
}

// With --cert-file a member asks another over HTTPS whose listener requires
// a client certificate: it presents its own and verifies the other's
// against --trusted-ca-file, or --peer-trusted-ca-file without one. The
// host name is verified (the certificate lists 127.0.0.1 and localhost).
func TestNewHTTPCallsTLSMembersWithClientCertificates(t *testing.T) {
	files := testcerts.New(t)
	discard := slog.New(slog.DiscardHandler)
	// The member asked: TLS only, client certificates required.
	srvSrc, err := tlsconf.Load(tlsconf.Files{Cert: files.Cert, Key: files.Key, CA: files.CA}, discard)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, `{"version":"x","id":"2","cluster_version":1,"max_cluster_version":7}`)
	}))
	srv.TLS = srvSrc.Server(tls.VersionTLS12, tlsconf.RequireClientCert)
	srv.StartTLS()
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)

	for _, tc := range []struct {
		name      string
		trustedCA string // --trusted-ca-file, also the node source's CA
		peerCA    string // --peer-trusted-ca-file
		host      string
	}{
		{name: "trusted CA", trustedCA: files.CA, host: "127.0.0.1"},
		{name: "peer CA when no trusted CA", peerCA: files.CA, host: "localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.CertFile, cfg.KeyFile, cfg.TrustedCAFile, cfg.PeerTrustedCAFile = files.Cert, files.Key, tc.trustedCA, tc.peerCA
			src, err := tlsconf.Load(tlsconf.Files{Cert: cfg.CertFile, Key: cfg.KeyFile, CA: cfg.TrustedCAFile}, discard)
			require.NoError(t, err)
			h, err := NewHTTP(cfg, src)
			require.NoError(t, err)
			require.Equal(t, "https", h.Scheme)
			v, err := askMaxClusterVersion(t.Context(), h, 2, net.JoinHostPort(tc.host, port))
			require.NoError(t, err)
			require.EqualValues(t, 7, v)
		})
	}

	// Without a CA that signed the member's certificate (the system
	// roots), verification fails: it is never skipped.
	cfg := config.Default()
	cfg.CertFile, cfg.KeyFile = files.Cert, files.Key
	src, err := tlsconf.Load(tlsconf.Files{Cert: cfg.CertFile, Key: cfg.KeyFile}, discard)
	require.NoError(t, err)
	h, err := NewHTTP(cfg, src)
	require.NoError(t, err)
	_, err = askMaxClusterVersion(t.Context(), h, 2, net.JoinHostPort("127.0.0.1", port))
	require.ErrorContains(t, err, "certificate")
}

// --join https://user:password@host sends the credentials as HTTP Basic,
// and no error or log line shows the password.
func TestJoinSendsCredentialsAndNeverShowsThem(t *testing.T) {
	var mu sync.Mutex
	var gotUser, gotPass string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotUser, gotPass, _ = r.BasicAuth()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"authentication required","code":"unauthorized"}`)
	}))
	defer srv.Close()
	// A port nobody listens on, for the failure that is retried.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	for _, tc := range []struct {
		name, join string
		timeout    time.Duration
		want       string
	}{
		{name: "refused", join: "http://alice:s3cret@" + strings.TrimPrefix(srv.URL, "http://"), timeout: time.Minute, want: "401 Unauthorized"},
		{name: "unreachable", join: "http://alice:s3cret@" + closed, timeout: 200 * time.Millisecond, want: "alice:xxxxx@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			logger := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
			cfg := config.Default()
			cfg.Name, cfg.DataDir, cfg.Join = "n2", t.TempDir(), tc.join
			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()
			_, err := Open(ctx, cfg, true, HTTP{}, logger)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "s3cret")
			require.NotContains(t, logs.String(), "s3cret")
			require.Contains(t, logs.String(), "alice:xxxxx@")
		})
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "alice", gotUser)
	require.Equal(t, "s3cret", gotPass)
}

// syncWriter serialises writes to w (slog handlers may write from any
// goroutine).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
