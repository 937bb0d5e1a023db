package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvd-project/kvd/internal/certgen"
)

// clusterCertsOptions holds the flags of `kvd certs cluster`.
type clusterCertsOptions struct {
	// Out holds everything: ca.*, one NAME.* per member, client.*.
	Out string
	// Members are the member names, as given to serve --name.
	Members []string
	// Hosts are DNS names (or IPs) added to every member certificate,
	// besides its name, localhost and 127.0.0.1.
	Hosts []string
	// CAName is the common name of a CA made by this run.
	CAName string
	// CADays and Days are the lifetimes of a new CA and of new member and
	// client certificates.
	CADays, Days int
}

func newCertsClusterCmd(asJSON *bool) *cobra.Command {
	opts := clusterCertsOptions{CAName: defaultCAName, CADays: defaultCADays, Days: defaultLeafDays}
	cmd := &cobra.Command{
		Use:   "cluster --out DIR --members n1,n2,n3",
		Short: "Make a CA, a certificate per member and a client certificate, keeping any that exist",
		Long: `Make, in --out, everything a secured cluster needs: a CA (ca.crt, ca.key),
one member certificate per --members name (NAME.crt, NAME.key; DNS names:
the member name, localhost and --host; IPs: 127.0.0.1), and a client
certificate named "client" (client.crt, client.key).

It is idempotent, so a compose init container or a Kubernetes job can run it
on every start: an existing CA is reused, and only missing certificates are
made. A certificate that exists is checked (signed by the CA, not expired,
its key matching) and kept, never reissued, even if --host changed: delete
NAME.crt and NAME.key to reissue one. Half a pair (a .crt without its .key or
the reverse) is an error rather than a guess.`,
		Example: `  kvd certs cluster --out /certs --members n1,n2,n3
  kvd certs cluster --out /certs --members n1,n2,n3 --host kvd.example.net,10.0.0.5 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var r certsReport
			err := runCertsCluster(opts, &r, time.Now())
			// What was written before a failure is reported too: those
			// files exist now, and the next run will keep them.
			if printErr := r.print(cmd.OutOrStdout(), *asJSON); err == nil {
				err = printErr
			}
			if err != nil {
				return fmt.Errorf("certs cluster: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.Out, "out", "", "directory for every file (created if missing)")
	cmd.Flags().StringSliceVar(&opts.Members, "members", nil, "member names, as given to serve --name (comma-separated or repeated)")
	cmd.Flags().StringSliceVar(&opts.Hosts, "host", nil, "extra DNS names (or IPs) for every member certificate")
	cmd.Flags().StringVar(&opts.CAName, "ca-name", opts.CAName, "common name of the CA, if one is made")
	cmd.Flags().IntVar(&opts.CADays, "ca-days", opts.CADays, "days a new CA is valid")
	cmd.Flags().IntVar(&opts.Days, "days", opts.Days, "days a new member or client certificate is valid (at most until the CA expires)")
	_ = cmd.MarkFlagRequired("out")
	_ = cmd.MarkFlagRequired("members")
	return cmd
}

func runCertsCluster(opts clusterCertsOptions, r *certsReport, now time.Time) error {
	caValid, err := daysFlag("--ca-days", opts.CADays)
	if err != nil {
		return err
	}
	leafValid, err := daysFlag("--days", opts.Days)
	if err != nil {
		return err
	}
	if len(opts.Members) == 0 {
		return errors.New("--members: give at least one member name")
	}
	// Check every name before writing anything.
	hosts := append([]string{"localhost"}, opts.Hosts...)
	reqs := make([]certgen.Request, 0, len(opts.Members)+1)
	names := make([]string, 0, len(opts.Members))
	for _, name := range opts.Members {
		name = strings.TrimSpace(name)
		if slices.Contains(names, name) {
			return fmt.Errorf("--members: %q given twice", name)
		}
		if name == clusterClientName {
			return fmt.Errorf("--members: %q is the name of the client certificate this command makes", name)
		}
		names = append(names, name)
		req, err := memberRequest(name, hosts, nil)
		if err != nil {
			return fmt.Errorf("--members: %w", err)
		}
		req.ValidFor = leafValid
		reqs = append(reqs, req)
	}
	client, err := clientRequest(clusterClientName)
	if err != nil {
		return err
	}
	client.ValidFor = leafValid
	reqs = append(reqs, client)

	if err := mkdirOut(opts.Out); err != nil {
		return err
	}
	caPair := certgen.PairIn(opts.Out, caBase)
	caExists, err := completePair(caPair)
	if err != nil {
		return err
	}
	if caExists {
		r.kept(caPair)
	} else {
		certPEM, keyPEM, err := certgen.NewCA(opts.CAName, caValid)
		if err != nil {
			return err
		}
		if err := caPair.Write(certPEM, keyPEM, false); err != nil {
			return err
		}
		r.wrote(caPair)
	}
	caCert, caKey, err := readCA(opts.Out)
	if err != nil {
		return err
	}

	for _, req := range reqs {
		pair := certgen.PairIn(opts.Out, req.CommonName)
		exists, err := completePair(pair)
		if err != nil {
			return err
		}
		if exists {
			if err := checkKept(caCert, pair, req.Usage, now); err != nil {
				return err
			}
			r.kept(pair)
			continue
		}
		certPEM, keyPEM, err := certgen.Issue(caCert, caKey, req)
		if err != nil {
			return err
		}
		if err := pair.Write(certPEM, keyPEM, false); err != nil {
			return err
		}
		r.wrote(pair)
	}
	return nil
}

// completePair reports whether both files of pair exist, and fails if only
// one does: that is not a state this command leaves (it writes the key, then
// the certificate, and a crash between them leaves a key alone), and which
// of them to trust is the operator's call.
func completePair(pair certgen.Pair) (bool, error) {
	cert, key, err := pair.Existing()
	switch {
	case err != nil:
		return false, err
	case cert && !key:
		return false, fmt.Errorf("%s exists without %s: remove it, or restore the key", pair.Cert, pair.Key)
	case key && !cert:
		return false, fmt.Errorf("%s exists without %s: remove it to have both made", pair.Key, pair.Cert)
	}
	return cert && key, nil
}

// checkKept refuses to keep a certificate that would not work: one from
// another CA (the CA was replaced), an expired one, or one whose key is not
// its own. Reissuing silently could hide whatever replaced the files.
func checkKept(caCert []byte, pair certgen.Pair, usage certgen.Usage, now time.Time) error {
	certPEM, keyPEM, err := pair.Read()
	if err != nil {
		return err
	}
	if err := certgen.Verify(caCert, certPEM, usage, now); err != nil {
		return fmt.Errorf("%s cannot be kept (%w); remove %s and %s to have them reissued", pair.Cert, err, pair.Cert, pair.Key)
	}
	if err := certgen.KeyMatches(certPEM, keyPEM); err != nil {
		return fmt.Errorf("%s: %w; remove %s and %s to have them reissued", pair.Key, err, pair.Cert, pair.Key)
	}
	return nil
}
