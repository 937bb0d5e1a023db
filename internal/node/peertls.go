package node

import (
	"fmt"
	"log/slog"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/tlsconf"
)

// loadPeerTLS reads the peer certificate, key and CA for mutual TLS between
// members; nil without --peer-cert-file (Validate has checked that the
// three come together).
func loadPeerTLS(cfg config.Config, logger *slog.Logger) (*tlsconf.Peer, error) {
	if cfg.PeerCertFile == "" {
		return nil, nil
	}
	src, err := tlsconf.Load(tlsconf.Files{Cert: cfg.PeerCertFile, Key: cfg.PeerKeyFile, CA: cfg.PeerTrustedCAFile},
		logger.With("component", "peer-tls"))
	if err != nil {
		return nil, fmt.Errorf("peer TLS: %w", err)
	}
	v, err := tlsconf.ParseMinVersion(cfg.TLSMinVersion)
	if err != nil {
		return nil, fmt.Errorf("peer TLS: %w", err)
	}
	p, err := tlsconf.NewPeer(src, v)
	if err != nil {
		return nil, fmt.Errorf("peer TLS: %w", err)
	}
	return p, nil
}

// memberID is IDOf as the transport takes it: the member a peer
// certificate names, by the same hash that made the members' raft IDs.
func memberID(name string) uint64 { return uint64(IDOf(name)) }
