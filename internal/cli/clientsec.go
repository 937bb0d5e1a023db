package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/kvd-project/kvd/internal/migrate"
)

// passwordEnv holds the password of --user NAME when NAME carries none.
const passwordEnv = "KVD_PASSWORD"

// clientSecurity holds the client-side TLS and credential flags that kvd
// cluster, kvd healthcheck and kvd bench share: what CA to trust, what
// certificate to present, and whom to authenticate as.
type clientSecurity struct {
	caFile, certFile, keyFile string
	// user is --user NAME[:PASSWORD].
	user string
	// forceTLS is bench's --tls: TLS with the system roots and no other
	// TLS flag (an HTTPS URL says as much for the HTTP commands).
	forceTLS bool

	// lookupEnv and prompt find a password --user does not carry; nil:
	// os.LookupEnv, and asking on the terminal.
	lookupEnv func(string) (string, bool)
	prompt    func(user string) (string, error)
}

// bind adds the shared flags to fs.
func (s *clientSecurity) bind(fs *pflag.FlagSet) {
	fs.StringVar(&s.caFile, "cacert", "", "CA certificate (PEM) to trust for the server's certificate, instead of the system roots")
	fs.StringVar(&s.certFile, "cert", "", "client certificate (PEM) to present, for servers started with --client-cert-auth (needs --key)")
	fs.StringVar(&s.keyFile, "key", "", "private key (PEM) of --cert")
	fs.StringVar(&s.user, "user", "", "authenticate as NAME[:PASSWORD]; without a password, $"+passwordEnv+", else asked on the terminal")
}

// wantsTLS reports whether any TLS flag was given.
func (s *clientSecurity) wantsTLS() bool {
	return s.forceTLS || s.caFile != "" || s.certFile != "" || s.keyFile != ""
}

// tlsConfig is the client TLS configuration the flags describe, nil when
// none was given. Errors name the flag at fault.
func (s *clientSecurity) tlsConfig() (*tls.Config, error) {
	if !s.wantsTLS() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", s.caFile)
		}
	}
	switch {
	case s.certFile != "" && s.keyFile == "":
		return nil, errors.New("--cert: needs --key, the certificate's private key")
	case s.keyFile != "" && s.certFile == "":
		return nil, errors.New("--key: needs --cert, the certificate it belongs to")
	case s.certFile != "":
		pair, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// credentials are --user's name and password; ok is false without --user.
// A name without ":PASSWORD" takes the password from $KVD_PASSWORD, else
// from the terminal, else fails: a script must not hang on a prompt.
func (s *clientSecurity) credentials() (user, password string, ok bool, err error) {
	if s.user == "" {
		return "", "", false, nil
	}
	user, password, hasPass := strings.Cut(s.user, ":")
	if user == "" {
		return "", "", false, errors.New("--user: the name is empty (want NAME or NAME:PASSWORD)")
	}
	if hasPass {
		return user, password, true, nil
	}
	lookup := s.lookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if p, found := lookup(passwordEnv); found {
		return user, p, true, nil
	}
	prompt := s.prompt
	if prompt == nil {
		prompt = terminalPrompt
	}
	if password, err = prompt(user); err != nil {
		return "", "", false, fmt.Errorf("--user %s: %w", user, err)
	}
	return user, password, true, nil
}

// errNoTerminal is a password needed where nobody can be asked.
var errNoTerminal = errors.New("no password: give NAME:PASSWORD or set " + passwordEnv + " (standard input is not a terminal to ask on)")

// terminalPrompt asks for user's password on the terminal, without echo.
func terminalPrompt(user string) (string, error) {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", errNoTerminal
	}
	fmt.Fprintf(os.Stderr, "Password for %s: ", user)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return "", fmt.Errorf("read password: %w", err)
	}
	return string(b), nil
}

// httpClient is the HTTP client the flags describe: its TLS settings apply
// to https URLs. http.DefaultClient without TLS flags.
func (s *clientSecurity) httpClient() (*http.Client, error) {
	tc, err := s.tlsConfig()
	if err != nil || tc == nil {
		return http.DefaultClient, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Transport: tr}, nil
}

// httpAuth is what the HTTP commands need of the flags: a client and the
// Basic credentials (user "" for none).
type httpAuth struct {
	client         *http.Client
	user, password string
}

// http resolves the flags for an HTTP command.
func (s *clientSecurity) http() (httpAuth, error) {
	hc, err := s.httpClient()
	if err != nil {
		return httpAuth{}, err
	}
	user, password, _, err := s.credentials()
	if err != nil {
		return httpAuth{}, err
	}
	return httpAuth{client: hc, user: user, password: password}, nil
}

// do sends req with the credentials, if any.
func (a httpAuth) do(req *http.Request) (*http.Response, error) {
	return a.asClient().Do(req)
}

// asClient is a client that sends the credentials on every request itself,
// for code that takes an *http.Client (backup.Save).
func (a httpAuth) asClient() *http.Client {
	hc := a.client
	if hc == nil {
		hc = http.DefaultClient
	}
	if a.user == "" {
		return hc
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c := *hc
	c.Transport = basicAuthTransport{next: next, user: a.user, password: a.password}
	return &c
}

// basicAuthTransport adds Basic credentials to each request the command
// makes, and to a redirect only if it stays on the same host and scheme:
// net/http strips an Authorization header on a redirect to another host,
// and credentials added below it must not undo that.
type basicAuthTransport struct {
	next           http.RoundTripper
	user, password string
}

func (t basicAuthTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !sameOrigin(firstRequest(req), req) {
		return t.next.RoundTrip(req)
	}
	req = req.Clone(req.Context()) // a RoundTripper must not change its request
	req.SetBasicAuth(t.user, t.password)
	return t.next.RoundTrip(req)
}

// firstRequest is the request a chain of redirects started from.
func firstRequest(req *http.Request) *http.Request {
	for req.Response != nil && req.Response.Request != nil {
		req = req.Response.Request
	}
	return req
}

// sameOrigin reports whether b goes where a went: same host and port, and
// not from https down to http.
func sameOrigin(a, b *http.Request) bool {
	return strings.EqualFold(a.URL.Host, b.URL.Host) && (a.URL.Scheme != "https" || b.URL.Scheme == "https")
}

// defaultScheme is the scheme of an address given without one: https when
// a TLS flag was given.
func (s *clientSecurity) defaultScheme() string {
	if s.wantsTLS() {
		return "https"
	}
	return "http"
}

// memcacheDialer is how kvd import reaches kvd's memcache port: TCP, then
// TLS if a TLS flag was given, then memcached's text login if --user was.
// A refused login fails the dial with the server's answer, so the import
// stops at its first connection saying why.
func (s *clientSecurity) memcacheDialer() (migrate.Dialer, error) {
	tc, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	user, password, login, err := s.credentials()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		if tc != nil {
			cfg := tc
			if cfg.ServerName == "" {
				cfg = tc.Clone()
				cfg.ServerName, _, _ = net.SplitHostPort(addr)
			}
			t := tls.Client(c, cfg)
			if err := t.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
			}
			c = t
		}
		if login {
			if err := memcacheLogin(ctx, c, user, password); err != nil {
				c.Close()
				return nil, fmt.Errorf("%s: %w", addr, err)
			}
		}
		return c, nil
	}, nil
}

// loginTimeout bounds the login exchange when ctx has no sooner deadline.
const loginTimeout = 10 * time.Second

// memcacheLogin sends memcached's text-protocol login, a set whose data is
// "user password", and reads its one-line answer: STORED, or the error
// that refused it.
func memcacheLogin(ctx context.Context, c net.Conn, user, password string) error {
	deadline := time.Now().Add(loginTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	defer c.SetDeadline(time.Time{})
	// A server without logins takes the login for a write of an item
	// named auth holding the password: ask first whether it wants one.
	if _, err := io.WriteString(c, "version\r\n"); err != nil {
		return fmt.Errorf("send version: %w", err)
	}
	answer, err := readLine(c)
	if err != nil {
		return fmt.Errorf("read version answer: %w", err)
	}
	if strings.HasPrefix(answer, "VERSION ") {
		return errors.New("--user given, but the server requires no login (it would store the login as an item named auth); leave --user out")
	}
	cred := user + " " + password
	if _, err := fmt.Fprintf(c, "set auth 0 0 %d\r\n%s\r\n", len(cred), cred); err != nil {
		return fmt.Errorf("send login: %w", err)
	}
	if answer, err = readLine(c); err != nil {
		return fmt.Errorf("read login answer: %w", err)
	}
	if answer != "STORED" {
		return fmt.Errorf("authentication as %q refused: %.200s", user, answer)
	}
	return nil
}

// readLine reads one answer line, byte by byte: a buffered reader would
// keep what the connection's next user must read.
func readLine(c net.Conn) (string, error) {
	var line []byte
	var b [1]byte
	for len(line) < 1024 {
		if _, err := c.Read(b[:]); err != nil {
			return "", err
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	return strings.TrimSuffix(string(line), "\r"), nil
}
