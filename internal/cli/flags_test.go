package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runArgs runs the root command with args and returns its stdout, its
// stderr and its error.
func runArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// A bad --log-level is reported with every other problem of the
// configuration, before anything starts.
func TestServeReportsEveryConfigProblemAtOnce(t *testing.T) {
	_, _, err := runArgs(t, "serve", "--data-dir", t.TempDir(), "--log-level", "loud", "--max-connections", "0",
		"--memcache-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0")
	require.Error(t, err)
	require.Contains(t, err.Error(), "log-level")
	require.Contains(t, err.Error(), "max-connections")
}

// kvd cluster refuses a request bound that would expire every request
// before it is sent, naming the flag, before dialling anyone.
func TestClusterRefusesANonPositiveTimeout(t *testing.T) {
	for _, timeout := range []string{"0s", "-1s"} {
		_, _, err := runArgs(t, "cluster", "status", "--endpoints", "http://127.0.0.1:1", "--timeout", timeout)
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), "--timeout"), "%s: %v", timeout, err)
	}
}
