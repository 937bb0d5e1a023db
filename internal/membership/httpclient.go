package membership

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/tlsconf"
)

// HTTP is how this member calls another member's HTTP API: a join, a
// version or leader-address question, an admin request passed to the
// leader. Every member's HTTP listener speaks TLS or none does (they share
// a configuration), so one scheme and one client serve all of them.
//
// Host names are verified as for any HTTPS client: the certificate of each
// member must list (as a DNS or IP subject alternative name) the host of
// the HTTP address it advertises (--advertise-http-addr, else its bound
// --http-addr with a wildcard host replaced by its host name).
type HTTP struct {
	// Client sends the requests; nil: http.DefaultClient.
	Client *http.Client
	// Scheme is "https" when the members' HTTP listeners speak TLS, else
	// "http".
	Scheme string
}

// NewHTTP builds the member-to-member HTTP client of a node configured by
// cfg. src is the node's client-facing TLS material (--cert-file, with
// --trusted-ca-file as its CA), nil without --cert-file: plain HTTP then.
//
// With TLS the client presents the member's --cert-file, which member
// certificates issue for client use as well as server use, so members whose
// listeners require client certificates (--client-cert-auth) accept it; it
// is the current one at every handshake, so a renewal in place applies
// without a restart. It trusts --trusted-ca-file, else
// --peer-trusted-ca-file, else the system roots; those are read once.
func NewHTTP(cfg config.Config, src *tlsconf.Source) (HTTP, error) {
	if src == nil {
		return HTTP{Client: http.DefaultClient, Scheme: "http"}, nil
	}
	tc := src.Client("")
	if cfg.TrustedCAFile == "" && cfg.PeerTrustedCAFile != "" {
		pem, err := os.ReadFile(cfg.PeerTrustedCAFile)
		if err != nil {
			return HTTP{}, fmt.Errorf("member HTTP client: read peer CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return HTTP{}, fmt.Errorf("member HTTP client: peer CA file %s: no PEM certificate in it", cfg.PeerTrustedCAFile)
		}
		tc.RootCAs = pool
	}
	// The certificate of the moment, not the one at start (src reloads).
	tc.Certificates = nil
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &src.Client("").Certificates[0], nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return HTTP{Client: &http.Client{Transport: tr}, Scheme: "https"}, nil
}

// url is the address of path on the member whose HTTP API is at addr
// (host:port).
func (h HTTP) url(addr, path string) string {
	scheme := h.Scheme
	if scheme == "" {
		scheme = "http"
	}
	return scheme + "://" + addr + path
}

// client is h.Client, or http.DefaultClient for the zero HTTP.
func (h HTTP) client() *http.Client {
	if h.Client == nil {
		return http.DefaultClient
	}
	return h.Client
}
