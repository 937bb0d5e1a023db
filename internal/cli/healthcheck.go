package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// healthcheckOptions holds the flags of `kvd healthcheck`.
type healthcheckOptions struct {
	// URL is the endpoint probed; 200 is healthy, anything else is not.
	URL string
	// Timeout bounds the whole probe, so a wedged node fails the check
	// instead of hanging the container runtime's probe.
	Timeout time.Duration
	// Security are the TLS and credential flags (an https URL uses the
	// TLS ones).
	Security clientSecurity
}

// notHealthyError makes main exit 1, the code Docker's HEALTHCHECK reads as
// "unhealthy" (2 is reserved there).
type notHealthyError struct{ reason string }

func (e *notHealthyError) Error() string { return e.reason }
func (e *notHealthyError) ExitCode() int { return 1 }

// newHealthcheckCmd exists because the container image is FROM scratch: there
// is no curl or wget to run a HEALTHCHECK with, so the binary probes itself.
func newHealthcheckCmd() *cobra.Command {
	opts := healthcheckOptions{URL: "http://127.0.0.1:11280/readyz", Timeout: 3 * time.Second}
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Probe a kvd HTTP endpoint (default /readyz): exit 0 on 200, 1 with the reason otherwise",
		Long: `Probe a kvd node's HTTP endpoint and exit 0 when it answers 200 OK.
Any other status, a connection error or the timeout exits 1 and prints
the reason (for /readyz, the JSON body that names it). Meant for container
HEALTHCHECKs in images that have no curl.`,
		Example: `  kvd healthcheck
  kvd healthcheck --url http://127.0.0.1:11280/healthz --timeout 1s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("url") && opts.Security.wantsTLS() {
				opts.URL = "https://127.0.0.1:11280/readyz"
			}
			return runHealthcheck(cmd.Context(), cmd.OutOrStdout(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.URL, "url", opts.URL, "HTTP endpoint to probe (https://… with a TLS node; the default becomes https with --cacert or --cert)")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", opts.Timeout, "bound on the whole probe")
	opts.Security.bind(cmd.Flags())
	return cmd
}

func runHealthcheck(ctx context.Context, out io.Writer, opts healthcheckOptions) error {
	if opts.Timeout <= 0 {
		return fmt.Errorf("healthcheck: --timeout %s must be positive", opts.Timeout)
	}
	auth, err := opts.Security.http()
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, opts.URL, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := auth.do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return &notHealthyError{fmt.Sprintf("healthcheck %s: no answer within %s", opts.URL, opts.Timeout)}
		}
		return &notHealthyError{fmt.Sprintf("healthcheck %s: %v", opts.URL, err)}
	}
	defer resp.Body.Close()
	// The body is small JSON; the cap keeps a misdirected URL from flooding
	// the runtime's health log.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return &notHealthyError{fmt.Sprintf("healthcheck %s: read body: %v", opts.URL, err)}
	}
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return &notHealthyError{fmt.Sprintf("healthcheck %s: %s: %s", opts.URL, resp.Status, text)}
	}
	_, err = fmt.Fprintf(out, "ok: %s\n", text)
	return err
}
