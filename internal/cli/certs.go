package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvd-project/kvd/internal/certgen"
	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/tlsconf"
)

// Defaults of `kvd certs`.
const (
	defaultCAName = "kvd CA"
	// defaultCADays: ten years, so the CA outlives several generations of
	// member certificates.
	defaultCADays = 3650
	// defaultLeafDays: 825 days is the longest lifetime Apple platforms
	// accept for a TLS server certificate; clients on them are kvd clients
	// too.
	defaultLeafDays = 825
	// maxDays keeps days × 24h far from time.Duration's limit (292 years).
	maxDays = 100 * 365
	// caBase names the CA's files, DIR/ca.crt and DIR/ca.key; no member or
	// client may take that name, or its key file would replace the CA's.
	caBase = "ca"
	// clusterClientName is the client certificate `kvd certs cluster` makes.
	clusterClientName = "client"
)

// certsReport is what a `kvd certs` subcommand did: the files it wrote and,
// for `cluster`, those it found and kept.
type certsReport struct {
	Wrote []string `json:"wrote"`
	Kept  []string `json:"kept"`
}

func (r *certsReport) wrote(p certgen.Pair) { r.Wrote = append(r.Wrote, p.Cert, p.Key) }
func (r *certsReport) kept(p certgen.Pair)  { r.Kept = append(r.Kept, p.Cert, p.Key) }

// print writes one line per file, or with asJSON one JSON object.
func (r *certsReport) print(out io.Writer, asJSON bool) error {
	if asJSON {
		if r.Wrote == nil {
			r.Wrote = []string{}
		}
		if r.Kept == nil {
			r.Kept = []string{}
		}
		return json.NewEncoder(out).Encode(r)
	}
	for _, p := range r.Wrote {
		if _, err := fmt.Fprintf(out, "wrote %s\n", p); err != nil {
			return err
		}
	}
	for _, p := range r.Kept {
		if _, err := fmt.Fprintf(out, "kept %s (exists)\n", p); err != nil {
			return err
		}
	}
	return nil
}

// newCertsCmd exists because the container image is FROM scratch: with no
// openssl in it, kvd makes the certificates of a secured cluster itself.
func newCertsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a CA, member and client certificates, and htpasswd users for a secured cluster (no openssl needed)",
		Long: `Make what a secured kvd cluster needs, without openssl:

  ca        a self-signed CA (ca.crt, ca.key)
  member    a member's certificate: CN and DNS name = the member name, usable
            as server and client, so the one NAME.crt/NAME.key serves as the
            member's --peer-cert-file and its --cert-file
  client    a client-only certificate (for --client-cert-auth)
  cluster   all of the above for a list of members, reusing what exists
  htpasswd  a bcrypt user line for --auth-file

Keys are ECDSA P-256, written with mode 0600; certificates 0644. Files that
exist are not replaced without --force (ca, member, client).`,
		Example: `  # A 3-member cluster, step by step:
  kvd certs ca --out certs
  kvd certs member n1 --ca-dir certs --out certs --host n1.example.net,localhost
  kvd certs member n2 --ca-dir certs --out certs --host n2.example.net --ip 10.0.0.2
  kvd certs member n3 --ca-dir certs --out certs --host n3.example.net
  kvd certs client app --ca-dir certs --out certs

  # ...or in one go (safe to run on every start, e.g. in an init container):
  kvd certs cluster --out certs --members n1,n2,n3 --host kvd.example.net

  # A user for --auth-file (the password is read, never printed):
  printf '%s\n' "$KVD_PASSWORD" | kvd certs htpasswd --user app --password-stdin --file certs/htpasswd

  # Then each member, e.g. n1 (listening beyond loopback):
  kvd serve --name n1 --initial-cluster n1=n1:11290,n2=n2:11290,n3=n3:11290 \
    --peer-addr 0.0.0.0:11290 --memcache-addr 0.0.0.0:11211 --http-addr 0.0.0.0:11280 \
    --cert-file certs/n1.crt --key-file certs/n1.key --trusted-ca-file certs/ca.crt \
    --peer-cert-file certs/n1.crt --peer-key-file certs/n1.key --peer-trusted-ca-file certs/ca.crt \
    --auth-file certs/htpasswd`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, `print one JSON object ({"wrote": [...], "kept": [...]}) instead of a line per file`)
	cmd.AddCommand(newCertsCACmd(&asJSON), newCertsIssueCmd(&asJSON, certgen.UsageBoth), newCertsIssueCmd(&asJSON, certgen.UsageClient),
		newCertsClusterCmd(&asJSON), newCertsHtpasswdCmd(&asJSON))
	return cmd
}

// caOptions holds the flags of `kvd certs ca`.
type caOptions struct {
	// Out is the directory ca.crt and ca.key go to; created if missing.
	Out string
	// Name is the CA's common name.
	Name string
	// Days is the CA's lifetime.
	Days int
	// Force replaces an existing CA, which orphans every certificate it
	// signed.
	Force bool
}

func newCertsCACmd(asJSON *bool) *cobra.Command {
	opts := caOptions{Name: defaultCAName, Days: defaultCADays}
	cmd := &cobra.Command{
		Use:   "ca --out DIR",
		Short: "Make a self-signed CA: DIR/ca.crt and DIR/ca.key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var r certsReport
			if err := runCertsCA(opts, &r); err != nil {
				return fmt.Errorf("certs ca: %w", err)
			}
			return r.print(cmd.OutOrStdout(), *asJSON)
		},
	}
	cmd.Flags().StringVar(&opts.Out, "out", "", "directory for ca.crt and ca.key (created if missing)")
	cmd.Flags().StringVar(&opts.Name, "name", opts.Name, "the CA's common name")
	cmd.Flags().IntVar(&opts.Days, "days", opts.Days, "days the CA is valid")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "replace an existing CA (every certificate it signed stops verifying)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func runCertsCA(opts caOptions, r *certsReport) error {
	validFor, err := daysFlag("--days", opts.Days)
	if err != nil {
		return err
	}
	if strings.TrimSpace(opts.Name) == "" {
		return errors.New("--name must not be empty")
	}
	if err := mkdirOut(opts.Out); err != nil {
		return err
	}
	pair := certgen.PairIn(opts.Out, caBase)
	if !opts.Force {
		// Check before generating: a key is cheap, but the message should
		// be about the file, not arrive after work thrown away.
		if err := refuseExisting(pair); err != nil {
			return err
		}
	}
	certPEM, keyPEM, err := certgen.NewCA(opts.Name, validFor)
	if err != nil {
		return err
	}
	if err := pair.Write(certPEM, keyPEM, opts.Force); err != nil {
		return err
	}
	r.wrote(pair)
	return nil
}

// issueOptions holds the flags of `kvd certs member` and `kvd certs client`.
type issueOptions struct {
	// CADir holds ca.crt and ca.key.
	CADir string
	// Out is where NAME.crt and NAME.key go; default CADir.
	Out string
	// Hosts are extra DNS names (IP literals among them go to the IP
	// SANs); "localhost" among them adds 127.0.0.1. Member only.
	Hosts []string
	// IPs are IP SANs. Member only.
	IPs []string
	// Days is the certificate's lifetime (capped at the CA's).
	Days int
	// Force replaces existing NAME.crt and NAME.key.
	Force bool
}

// newCertsIssueCmd builds `member` (usage both) or `client` (usage client).
func newCertsIssueCmd(asJSON *bool, usage certgen.Usage) *cobra.Command {
	opts := issueOptions{Days: defaultLeafDays}
	cmd := &cobra.Command{
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r certsReport
			if err := runCertsIssue(args[0], usage, opts, &r); err != nil {
				return fmt.Errorf("certs %s: %w", cmd.Name(), err)
			}
			return r.print(cmd.OutOrStdout(), *asJSON)
		},
	}
	if usage == certgen.UsageBoth {
		cmd.Use = "member NAME --ca-dir DIR --out DIR"
		cmd.Short = "Issue a member's certificate (CN and DNS name = NAME; server and client usage): NAME.crt, NAME.key"
		cmd.Long = `Issue a member's certificate, signed by the CA in --ca-dir. Its common name
and first DNS name are the member name (as given to serve --name), which is
what members check in each other's peer certificates; --host and --ip add
the names clients dial. It has both server and client usage: a member
accepts peers and dials them, and calls other members' HTTPS API, so the
one certificate serves as --peer-cert-file and as --cert-file.`
		cmd.Flags().StringSliceVar(&opts.Hosts, "host", nil, "extra DNS names (comma-separated or repeated); localhost also adds IP 127.0.0.1, IP literals become IP SANs")
		cmd.Flags().StringSliceVar(&opts.IPs, "ip", nil, "IP addresses (comma-separated or repeated)")
	} else {
		cmd.Use = "client NAME --ca-dir DIR --out DIR"
		cmd.Short = "Issue a client-only certificate (CN = NAME): NAME.crt, NAME.key"
		cmd.Long = `Issue a client-only certificate, signed by the CA in --ca-dir, for a client
of a kvd started with --trusted-ca-file (and --client-cert-auth).`
	}
	cmd.Flags().StringVar(&opts.CADir, "ca-dir", "", "directory holding ca.crt and ca.key")
	cmd.Flags().StringVar(&opts.Out, "out", "", "directory for NAME.crt and NAME.key (default: --ca-dir)")
	cmd.Flags().IntVar(&opts.Days, "days", opts.Days, "days the certificate is valid (at most until the CA expires)")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "replace an existing NAME.crt and NAME.key")
	_ = cmd.MarkFlagRequired("ca-dir")
	return cmd
}

func runCertsIssue(name string, usage certgen.Usage, opts issueOptions, r *certsReport) error {
	validFor, err := daysFlag("--days", opts.Days)
	if err != nil {
		return err
	}
	var req certgen.Request
	if usage == certgen.UsageBoth {
		req, err = memberRequest(name, opts.Hosts, opts.IPs)
	} else {
		req, err = clientRequest(name)
	}
	if err != nil {
		return err
	}
	req.ValidFor = validFor
	caCert, caKey, err := readCA(opts.CADir)
	if err != nil {
		return err
	}
	out := opts.Out
	if out == "" {
		out = opts.CADir
	}
	if err := mkdirOut(out); err != nil {
		return err
	}
	pair := certgen.PairIn(out, name)
	if !opts.Force {
		if err := refuseExisting(pair); err != nil {
			return err
		}
	}
	certPEM, keyPEM, err := certgen.Issue(caCert, caKey, req)
	if err != nil {
		return err
	}
	if err := pair.Write(certPEM, keyPEM, opts.Force); err != nil {
		return err
	}
	r.wrote(pair)
	return nil
}

// memberRequest is the certificate of member name: CN and first DNS name
// the member name, since peers check that the certificate names the member
// (internal/config's PeerCertFile); the hosts and IPs follow.
func memberRequest(name string, hosts, ips []string) (certgen.Request, error) {
	if err := checkCertName("member", name); err != nil {
		return certgen.Request{}, err
	}
	for _, r := range name {
		// The name is a DNS SAN, an ASCII-only field.
		if r < 0x21 || r > 0x7e {
			return certgen.Request{}, fmt.Errorf("member name %q: a certificate can name only a printable ASCII member name (it is a DNS name in the certificate)", name)
		}
	}
	// The kvd-member URI vouches for the certificate as a member's, so that
	// a member which has not applied this one's addition yet still lets it
	// speak (tlsconf.Vouched); a client certificate never carries it.
	req := certgen.Request{CommonName: name, DNSNames: []string{name}, URIs: []*url.URL{tlsconf.MemberURI(name)}, Usage: certgen.UsageBoth}
	addIP := func(ip net.IP) {
		if !slices.ContainsFunc(req.IPs, ip.Equal) {
			req.IPs = append(req.IPs, ip)
		}
	}
	for _, s := range ips {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil {
			return certgen.Request{}, fmt.Errorf("--ip %q is not an IP address", s)
		}
		addIP(ip)
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return certgen.Request{}, errors.New("--host: empty host name")
		}
		// A TLS client checks an address it dialled against the IP SANs
		// only; the same string as a DNS name would never match.
		if ip := net.ParseIP(h); ip != nil {
			addIP(ip)
			continue
		}
		if !slices.Contains(req.DNSNames, h) {
			req.DNSNames = append(req.DNSNames, h)
		}
		if strings.EqualFold(h, "localhost") {
			addIP(net.IPv4(127, 0, 0, 1))
		}
	}
	return req, nil
}

func clientRequest(name string) (certgen.Request, error) {
	if err := checkCertName("client", name); err != nil {
		return certgen.Request{}, err
	}
	return certgen.Request{CommonName: name, Usage: certgen.UsageClient}, nil
}

// checkCertName applies the member-name rules (config.CheckName) to a
// certificate's name, which is also its file name, so no '/' gets in; and
// keeps "ca" for the CA's own files.
func checkCertName(kind, name string) error {
	if err := config.CheckName(name); err != nil {
		return fmt.Errorf("%s name %q: %w", kind, name, err)
	}
	if name == caBase {
		return fmt.Errorf("%s name %q: taken by the CA's files (ca.crt, ca.key)", kind, name)
	}
	return nil
}

// readCA loads DIR/ca.crt and DIR/ca.key, telling a missing CA (run
// `kvd certs ca`) from one that cannot be read.
func readCA(dir string) (certPEM, keyPEM []byte, err error) {
	if dir == "" {
		return nil, nil, errors.New("--ca-dir is empty")
	}
	pair := certgen.PairIn(dir, caBase)
	certPEM, keyPEM, err = pair.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no CA in %s (%w); make one with: kvd certs ca --out %s", dir, err, dir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("CA in %s: %w", dir, err)
	}
	if _, err := certgen.ParseCertificate(certPEM); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", pair.Cert, err)
	}
	if _, err := certgen.ParsePrivateKey(keyPEM); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", pair.Key, err)
	}
	return certPEM, keyPEM, nil
}

// refuseExisting fails if either file of pair exists.
func refuseExisting(pair certgen.Pair) error {
	cert, key, err := pair.Existing()
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path   string
		exists bool
	}{{pair.Cert, cert}, {pair.Key, key}} {
		if f.exists {
			return fmt.Errorf("%s already exists (use --force to replace it)", f.path)
		}
	}
	return nil
}

func mkdirOut(dir string) error {
	if dir == "" {
		return errors.New("--out is empty")
	}
	if err := os.MkdirAll(filepath.Clean(dir), 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	return nil
}

func daysFlag(flag string, days int) (time.Duration, error) {
	if days < 1 || days > maxDays {
		return 0, fmt.Errorf("%s %d: must be between 1 and %d", flag, days, maxDays)
	}
	return time.Duration(days) * 24 * time.Hour, nil
}
