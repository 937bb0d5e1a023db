package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts the environment variable of every flag: --auth-file is
// KVD_AUTH_FILE. Containers and systemd units set the environment more
// easily than they assemble command lines, and a secret there stays out of
// the process list.
const envPrefix = "KVD_"

// envName is the environment variable that sets flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag of cmd that the command line did not set from
// its environment variable, if that is set. A flag set so counts as set
// (Changed), which is what puts the environment over serve's --config file,
// whose values give way to every set flag; the command line stays over the
// environment because its flags are never overwritten here.
func applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if e := cmd.Flags().Set(f.Name, v); e != nil {
			err = fmt.Errorf("environment variable %s (for --%s): %w", name, f.Name, e)
		}
	})
	return err
}

// withEnv makes every command under root read the environment before it
// runs. cobra runs only the nearest PersistentPreRunE of a command, so each
// command that has its own gets the environment applied ahead of it, and
// root's covers the rest.
func withEnv(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if next := c.PersistentPreRunE; next != nil || c == root {
			c.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
				if err := applyEnv(cmd); err != nil {
					return err
				}
				if next != nil {
					return next(cmd, args)
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
