// Package cli owns kvd's command line: one cobra command per verb, flags bound
// into option structs (never package variables), errors returned to main.
package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kvd-project/kvd/internal/version"
)

// NewRoot builds the kvd command tree. out and errOut receive the commands'
// normal and diagnostic output, so tests can capture both.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "kvd",
		Short: "kvd: a replicated, persistent key-value server for memcached clients",
		Long: `kvd is a memcached-compatible key-value server whose every write goes
through a Raft log and is fsynced on a quorum before it is acknowledged.
Point any memcache client at it.

Every flag of every command can also be set in the environment: KVD_ and
the flag's name in capitals with '-' as '_' (--auth-file is KVD_AUTH_FILE,
--user is KVD_USER). The command line wins over the environment, and the
environment over kvd serve's --config file.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newVersionCmd(), newServeCmd())
	root.AddCommand(newBenchCmd())
	root.AddCommand(newClusterCmd())
	root.AddCommand(newHealthcheckCmd())
	root.AddCommand(newSnapshotCmd())
	root.AddCommand(newCertsCmd())
	root.AddCommand(newMigrateCmds()...)
	withEnv(root) // last: it wraps the hooks of the commands above
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kvd's version and the memcached version it reports",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "kvd %s (memcached protocol %s)\n", version.Version, version.Memcached)
			return err
		},
	}
}
