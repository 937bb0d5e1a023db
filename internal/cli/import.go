package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvd-project/kvd/internal/migrate"
)

// importOptions are the flags of `kvd import`.
type importOptions struct {
	fromMemcached, fromFile, to string
	workers, batch              int
	verify, json                bool
	timeout, progress           time.Duration
	// sec is how kvd (--to) is reached: TLS and --user. The memcached
	// source is read in plain text, as memcached serves by default.
	sec clientSecurity
}

// exportOptions are the flags of `kvd export`.
type exportOptions struct {
	from, out         string
	json              bool
	timeout, progress time.Duration
	sec               clientSecurity
}

// newMigrateCmds builds `kvd import` and `kvd export`.
func newMigrateCmds() []*cobra.Command {
	o := &importOptions{}
	imp := &cobra.Command{
		Use:   "import",
		Short: "Copy a live memcached's items, or an export file's, into kvd through its memcache protocol, then verify them",
		Example: `  kvd import --from-memcached 10.0.0.5:11211 --to 127.0.0.1:11211
  kvd import --from-file kvd-export.jsonl --to 127.0.0.1:11211 --json
  kvd import --from-memcached 10.0.0.5:11211 --to kvd1:11211 --cacert ca.crt --user app`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := imp.Flags()
	f.StringVar(&o.fromMemcached, "from-memcached", "", "a memcached (1.6+) to copy from, host:port: keys via lru_crawler metadump, values via mg")
	f.StringVar(&o.fromFile, "from-file", "", "an export file (kvd export) to copy from")
	f.StringVar(&o.to, "to", "127.0.0.1:11211", "kvd's memcache address, host:port")
	f.IntVar(&o.workers, "workers", 4, "batches in flight at once, each on its own connections")
	f.IntVar(&o.batch, "batch", 100, "items pipelined per batch")
	f.BoolVar(&o.verify, "verify", true, "read every copied item back from kvd and compare value and flags")
	f.DurationVar(&o.timeout, "timeout", 0, "bound on the whole import (0: none)")
	f.DurationVar(&o.progress, "progress-interval", 2*time.Second, "how often progress is printed to stderr")
	f.BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	o.sec.bind(f)
	f.BoolVar(&o.sec.forceTLS, "tls", false, "speak TLS to kvd (implied by --cacert, --cert and --key)")
	imp.MarkFlagsMutuallyExclusive("from-memcached", "from-file")
	imp.MarkFlagsOneRequired("from-memcached", "from-file")

	eo := &exportOptions{}
	exp := &cobra.Command{
		Use:   "export",
		Short: "Write a consistent copy of kvd's items to a portable JSON Lines file (docs/backup.md, Export format)",
		Example: `  kvd export --from http://127.0.0.1:11280 --out kvd-export.jsonl
  kvd export --from https://kvd1:11280 --cacert ca.crt --user app --out kvd-export.jsonl
  kvd import --from-file kvd-export.jsonl --to other-kvd:11211`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return eo.run(cmd) },
	}
	ef := exp.Flags()
	ef.StringVar(&eo.from, "from", "http://127.0.0.1:11280", "HTTP address of the member to export from")
	ef.StringVar(&eo.out, "out", "", "the file to write (written as FILE.part, fsynced, renamed)")
	ef.DurationVar(&eo.timeout, "timeout", 0, "bound on the whole export (0: none)")
	ef.DurationVar(&eo.progress, "progress-interval", 2*time.Second, "how often progress is printed to stderr")
	ef.BoolVar(&eo.json, "json", false, "print a JSON summary on stdout")
	eo.sec.bind(ef)
	_ = exp.MarkFlagRequired("out")
	return []*cobra.Command{imp, exp}
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

func (o *importOptions) run(cmd *cobra.Command) error {
	var src migrate.Source
	if o.fromMemcached != "" {
		src = &migrate.MemcachedSource{Addr: o.fromMemcached}
	} else {
		src = &migrate.FileSource{Path: o.fromFile}
	}
	dial, err := o.sec.memcacheDialer()
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(cmd.Context(), o.timeout)
	defer cancel()
	errOut := cmd.ErrOrStderr()
	tty := isTerminal(errOut)
	opts := migrate.Options{Dial: dial, Source: src, To: o.to, Workers: o.workers, BatchItems: o.batch, Verify: o.verify,
		ProgressEvery: o.progress, Progress: func(p migrate.Progress) { printImportProgress(errOut, tty, p) },
		Logger: slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if tty {
		opts.ProgressEvery = 200 * time.Millisecond
	}
	sum, err := migrate.Import(ctx, opts)
	if tty {
		fmt.Fprintln(errOut)
	}
	// The summary comes out whatever happened: after a failure it is what
	// was copied before it.
	if perr := printImportSummary(cmd.OutOrStdout(), o.json, sum); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	return sum.Err()
}

func printImportProgress(w io.Writer, tty bool, p migrate.Progress) {
	rate := float64(p.Copied) / max(p.Elapsed.Seconds(), 1e-9)
	mb := float64(p.Bytes) / 1e6
	if p.Phase == "verify" {
		if tty {
			fmt.Fprintf(w, "\rverify: %d of %d checked   ", p.Verified, p.Copied)
			return
		}
		fmt.Fprintf(w, "import verify: %d of %d checked\n", p.Verified, p.Copied)
		return
	}
	if tty {
		fmt.Fprintf(w, "\r%d listed, %d copied, %d expired, %d missing, %d failed, %.1f MB, %.0f items/s   ",
			p.Listed, p.Copied, p.Expired, p.Missing, p.Failed, mb, rate)
		return
	}
	fmt.Fprintf(w, "import: %d listed, %d copied, %d expired, %d missing, %d failed, %.1f MB, %.0f items/s\n",
		p.Listed, p.Copied, p.Expired, p.Missing, p.Failed, mb, rate)
}

func printImportSummary(w io.Writer, asJSON bool, s migrate.Summary) error {
	if asJSON {
		return json.NewEncoder(w).Encode(s)
	}
	var b strings.Builder
	state := "imported"
	if !s.Complete {
		state = "import STOPPED"
	}
	fmt.Fprintf(&b, "%s from %s into kvd %s: %d copied, %d expired meanwhile, %d missing meanwhile (deleted), %d failed of %d listed; %.1f MB in %.2fs (%.0f items/s, %.1f MB/s)\n",
		state, s.Source, s.Target, s.Copied, s.Expired, s.Missing, s.Failed, s.Listed, float64(s.Bytes)/1e6, s.Seconds, s.ItemsPerSecond, s.MBPerSecond)
	for _, f := range s.Failures {
		fmt.Fprintf(&b, "  failed: %s\n", f)
	}
	if s.Verified {
		fmt.Fprintf(&b, "verify: %d checked, %d mismatched, %d expired since copied (%.2fs)\n", s.VerifyChecked, s.Mismatches, s.ExpiredBeforeVerify, s.VerifySeconds)
		for _, k := range s.MismatchKeys {
			fmt.Fprintf(&b, "  mismatch: %s\n", k)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (o *exportOptions) run(cmd *cobra.Command) error {
	endpoint := strings.TrimSpace(strings.Split(o.from, ",")[0])
	if !cmd.Flags().Changed("from") && o.sec.wantsTLS() {
		endpoint = strings.Replace(endpoint, "http://", "https://", 1)
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = o.sec.defaultScheme() + "://" + endpoint
	}
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return fmt.Errorf("--from: %q is not an HTTP address (http://host:port)", o.from)
	}
	if o.out == "" {
		return errors.New("export: --out FILE is required")
	}
	auth, err := o.sec.http()
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(cmd.Context(), o.timeout)
	defer cancel()
	errOut := cmd.ErrOrStderr()
	tty := isTerminal(errOut)
	every := o.progress
	if tty {
		every = 200 * time.Millisecond
	}
	sum, err := migrate.Export(ctx, migrate.ExportOptions{Endpoint: endpoint, Client: auth.asClient(), Out: o.out, ProgressEvery: every,
		Progress: func(items, bytes uint64, d time.Duration) {
			rate := float64(bytes) / 1e6 / max(d.Seconds(), 1e-9)
			if tty {
				fmt.Fprintf(errOut, "\r%d items, %.1f MB, %.1f MB/s   ", items, float64(bytes)/1e6, rate)
				return
			}
			fmt.Fprintf(errOut, "export: %d items, %.1f MB, %.1f MB/s\n", items, float64(bytes)/1e6, rate)
		}})
	if tty {
		fmt.Fprintln(errOut)
	}
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(sum)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "exported %d items (%d value bytes, %d file bytes) from %s at applied index %d to %s in %.2fs (%.1f MB/s)\n",
		sum.Items, sum.ValueBytes, sum.FileBytes, sum.Member, sum.Applied, sum.File, sum.Seconds, sum.MBPerSecond)
	return err
}
