package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kvd-project/kvd/internal/htpasswd"
)

// htpasswdOptions holds the flags of `kvd certs htpasswd`.
type htpasswdOptions struct {
	// User is the user name the line is for.
	User string
	// PasswordStdin reads the password from the first line of stdin;
	// PasswordEnv names an environment variable holding it. Exactly one:
	// a password flag would sit in the shell history and in ps output.
	PasswordStdin bool
	PasswordEnv   string
	// File is the htpasswd file to update; empty prints the line instead.
	File string
	// Cost is bcrypt's cost (log2 of its rounds).
	Cost int
}

// defaultBcryptCost is Apache htpasswd -B's default.
const defaultBcryptCost = 10

// maxPasswordLine bounds what is read from stdin for a password.
const maxPasswordLine = 4096

func newCertsHtpasswdCmd(asJSON *bool) *cobra.Command {
	opts := htpasswdOptions{Cost: defaultBcryptCost}
	cmd := &cobra.Command{
		Use:   "htpasswd --user U (--password-stdin | --password-env VAR) [--file F]",
		Short: "Add or replace a user's bcrypt line in an htpasswd file (for --auth-file)",
		Long: `Hash a password with bcrypt and set the user's line ("user:$2a$...") in the
htpasswd file given to serve --auth-file, as Apache's htpasswd -B does:
an existing line of the user is replaced, otherwise one is appended. The
file is rewritten atomically (a running kvd re-reads it) with mode 0600.
Without --file the line is printed instead.

The password comes from stdin (its first line) or an environment variable,
never from a flag, and is never printed.`,
		Example: `  printf '%s\n' "$PASSWORD" | kvd certs htpasswd --user app --password-stdin --file certs/htpasswd
  KVD_PASSWORD=... kvd certs htpasswd --user app --password-env KVD_PASSWORD --file certs/htpasswd
  kvd certs htpasswd --user app --password-stdin    # prints the line`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runCertsHtpasswd(cmd.InOrStdin(), cmd.ErrOrStderr(), cmd.OutOrStdout(), opts, *asJSON); err != nil {
				return fmt.Errorf("certs htpasswd: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.User, "user", "", "user name (no ':', spaces or control characters)")
	cmd.Flags().BoolVar(&opts.PasswordStdin, "password-stdin", false, "read the password from the first line of stdin (hidden prompt on a terminal)")
	cmd.Flags().StringVar(&opts.PasswordEnv, "password-env", "", "read the password from this environment variable")
	cmd.Flags().StringVar(&opts.File, "file", "", "htpasswd file to update or create (default: print the line)")
	cmd.Flags().IntVar(&opts.Cost, "cost", opts.Cost, "bcrypt cost, 4 to 31 (each step doubles the time to hash and to check)")
	_ = cmd.MarkFlagRequired("user")
	cmd.MarkFlagsMutuallyExclusive("password-stdin", "password-env")
	cmd.MarkFlagsOneRequired("password-stdin", "password-env")
	return cmd
}

func runCertsHtpasswd(in io.Reader, prompt, out io.Writer, opts htpasswdOptions, asJSON bool) error {
	if err := htpasswd.CheckUser(opts.User); err != nil {
		return fmt.Errorf("--user: %w", err)
	}
	password, err := readPassword(in, prompt, opts)
	if err != nil {
		return err
	}
	hash, err := htpasswd.Hash(password, opts.Cost)
	clear(password)
	if err != nil {
		return err
	}
	if opts.File == "" {
		line := opts.User + ":" + string(hash)
		if asJSON {
			return json.NewEncoder(out).Encode(struct {
				Line string `json:"line"`
			}{line})
		}
		_, err := fmt.Fprintln(out, line)
		return err
	}
	replaced, err := htpasswd.Update(opts.File, opts.User, hash)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(struct {
			Wrote    []string `json:"wrote"`
			User     string   `json:"user"`
			Replaced bool     `json:"replaced"`
		}{[]string{opts.File}, opts.User, replaced})
	}
	what := "added"
	if replaced {
		what = "replaced"
	}
	_, err = fmt.Fprintf(out, "wrote %s (user %s %s)\n", opts.File, opts.User, what)
	return err
}

// readPassword returns the password from the source opts name. On a
// terminal stdin the password is read without echo.
func readPassword(in io.Reader, prompt io.Writer, opts htpasswdOptions) ([]byte, error) {
	if opts.PasswordEnv != "" {
		v, ok := os.LookupEnv(opts.PasswordEnv)
		if !ok {
			return nil, fmt.Errorf("--password-env: environment variable %s is not set", opts.PasswordEnv)
		}
		if v == "" {
			return nil, fmt.Errorf("--password-env: environment variable %s is empty", opts.PasswordEnv)
		}
		return []byte(v), nil
	}
	if !opts.PasswordStdin {
		return nil, errors.New("give --password-stdin or --password-env")
	}
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if _, err := fmt.Fprintf(prompt, "Password for %s: ", opts.User); err != nil {
			return nil, err
		}
		password, err := term.ReadPassword(int(f.Fd()))
		_, _ = fmt.Fprintln(prompt)
		if err != nil {
			return nil, fmt.Errorf("read password from the terminal: %w", err)
		}
		return password, nil
	}
	line, err := bufio.NewReaderSize(io.LimitReader(in, maxPasswordLine+1), maxPasswordLine+1).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("--password-stdin: read: %w", err)
	}
	if len(line) > maxPasswordLine {
		return nil, fmt.Errorf("--password-stdin: first line longer than %d bytes", maxPasswordLine)
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return nil, errors.New("--password-stdin: no password on stdin (an empty first line)")
	}
	return []byte(line), nil
}
