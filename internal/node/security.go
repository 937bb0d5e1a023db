package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/kvd-project/kvd/internal/auth"
	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/ratelog"
	"github.com/kvd-project/kvd/internal/tlsconf"
)

// reloadInterval is how often certificate and credential files are checked
// for changes: a renewal in place applies within it, without a signal.
const reloadInterval = time.Second

// clientTLS loads the memcache and HTTP listeners' TLS material, or returns
// nil when --cert-file is not set (plaintext listeners).
func clientTLS(cfg config.Config, logger *slog.Logger) (*tlsconf.Source, *tls.Config, error) {
	if cfg.CertFile == "" {
		return nil, nil, nil
	}
	src, err := tlsconf.Load(tlsconf.Files{Cert: cfg.CertFile, Key: cfg.KeyFile, CA: cfg.TrustedCAFile}, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("load TLS certificate for the memcache and HTTP listeners: %w", err)
	}
	minVersion, err := tlsconf.ParseMinVersion(cfg.TLSMinVersion)
	if err != nil {
		return nil, nil, err
	}
	mode := tlsconf.NoClientCert
	switch {
	case cfg.ClientCertAuth:
		mode = tlsconf.RequireClientCert
	case cfg.TrustedCAFile != "":
		mode = tlsconf.VerifyIfGiven
	}
	return src, src.Server(minVersion, mode), nil
}

// openAuth opens --auth-file: the store the memcache listener checks, and
// the same store as the HTTP API's authenticator; both nil without the
// flag (an interface holding a nil *auth.Store would not be nil).
func openAuth(cfg config.Config, logger *slog.Logger) (*auth.Store, httpapi.Authenticator, error) {
	if cfg.AuthFile == "" {
		return nil, nil, nil
	}
	store, err := auth.Open(cfg.AuthFile, logger.With("component", "auth"))
	if err != nil {
		return nil, nil, fmt.Errorf("open auth file: %w", err)
	}
	return store, store, nil
}

// listenTLS wraps ln in TLS when srv is set. Both client-facing listeners
// are TLS-only then, as memcached's -Z makes its port: a second, plaintext
// port beside it would be the one a misconfigured client silently uses.
func listenTLS(ln net.Listener, srv *tls.Config) net.Listener {
	if srv == nil {
		return ln
	}
	return tls.NewListener(ln, srv)
}

// httpErrorLog is net/http's error log (TLS handshake failures, malformed
// requests) through the node's logger, rate-limited: anyone who reaches the
// port can cause one.
func httpErrorLog(logger *slog.Logger) *log.Logger {
	return log.New(ratelog.New(logger, time.Second), "", 0)
}

// warnInsecure says loudly, at start, which listeners anyone who reaches
// them may use without a certificate or a password.
func warnInsecure(cfg config.Config, logger *slog.Logger) {
	for _, what := range cfg.Insecure() {
		logger.Warn("INSECURE: "+what+" on a non-loopback address: anyone who can reach it can read, write and flush every item"+
			" (see the README's Security section)", "memcache_addr", cfg.MemcacheAddr, "http_addr", cfg.HTTPAddr, "peer_addr", cfg.PeerAddr)
	}
}

// Reload re-reads every certificate, key, CA and credentials file now (what
// SIGHUP asks for; the files are also checked every second). A file that
// fails to load leaves the current material in place; the errors are
// returned, and logged by each source.
func (n *Node) Reload() error {
	var errs []error
	for _, r := range n.reloaders {
		if err := r(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("reload: %v", errs)
	}
	n.logger.Info("reloaded certificates and credentials")
	return nil
}

// watchFiles reloads src every reloadInterval for the node's life and
// registers it for Reload.
func (n *Node) watchFiles(ctx context.Context, src *tlsconf.Source) {
	n.reloaders = append(n.reloaders, func() error { _, err := src.Reload(); return err })
	go src.Run(ctx, reloadInterval)
}
