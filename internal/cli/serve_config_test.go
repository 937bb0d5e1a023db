package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
)

// Every config file key is a flag of kvd serve and every flag but --config
// is a key, so that "its keys are these flag names" stays true.
func TestServeFlagsMirrorConfigKeys(t *testing.T) {
	var keys []string
	typ := reflect.TypeOf(config.Config{})
	for i := range typ.NumField() {
		keys = append(keys, typ.Field(i).Tag.Get("yaml"))
	}
	var flags []string
	serve, _, err := NewRoot(nil, nil).Find([]string{"serve"})
	require.NoError(t, err)
	serve.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" && f.Name != "help" {
			flags = append(flags, f.Name)
		}
	})
	sort.Strings(keys)
	sort.Strings(flags)
	require.Equal(t, keys, flags)
}

// A flag given on the command line wins over the file; the file wins over
// the defaults. The file below is refused (its log-level, and each value
// the flags do not override), and which errors are reported shows the merged
// configuration without starting a node.
func TestServeFlagsOverrideConfigFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kvd.yaml")
	require.NoError(t, os.WriteFile(p, []byte("log-level: loud\nmax-connections: 0\nmax-pending: 0\n"), 0o600))
	_, _, err := runArgs(t, "serve", "--config", p, "--max-connections", "5")
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `log-level "loud"`, "the file is read")
	require.Contains(t, msg, "max-pending 0", "the file's value beats the default")
	require.False(t, strings.Contains(msg, "max-connections"), "the flag beats the file: %s", msg)
}
