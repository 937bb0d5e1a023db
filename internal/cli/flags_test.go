package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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

// A misspelt subcommand of kvd cluster is an error, as on the root command,
// so a script with a typo fails; kvd cluster alone prints its help.
func TestClusterUnknownSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		err     string // "" = help, no error
		suggest string
	}{
		{args: []string{"cluster"}},
		{args: []string{"cluster", "--help"}},
		{args: []string{"cluster", "stauts", "--endpoints", "http://127.0.0.1:1"}, err: `unknown command "stauts" for "kvd cluster"`, suggest: "status"},
		{args: []string{"cluster", "remvoe", "n3"}, err: `unknown command "remvoe" for "kvd cluster"`, suggest: "remove"},
		{args: []string{"cluster", "frobnicate"}, err: `unknown command "frobnicate" for "kvd cluster"`},
	} {
		out, _, err := runArgs(t, tc.args...)
		if tc.err == "" {
			require.NoError(t, err, "%v", tc.args)
			require.Contains(t, out, "Available Commands:", "%v prints help", tc.args)
			continue
		}
		require.ErrorContains(t, err, tc.err, "%v", tc.args)
		if tc.suggest != "" {
			require.ErrorContains(t, err, "Did you mean this?\n\t"+tc.suggest, "%v", tc.args)
		}
		require.NotContains(t, out, "Available Commands:", "%v: an error, not help", tc.args)
	}
}

// kvd cluster add names as --join the member that answered, not the first
// of --endpoints (which may be down), and sends its body as JSON, which
// the cluster endpoints require.
func TestClusterAddJoinsThroughTheMemberThatAnswered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/cluster/members" ||
			r.Header.Get("Content-Type") != "application/json" || !json.Valid(body) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"cluster_id": "1", "id": "2"})
	}))
	defer srv.Close()
	// Port 1 on loopback refuses the connection: a member that is down.
	out, _, err := runArgs(t, "cluster", "add", "n4", "127.0.0.1:11294", "--endpoints", "http://127.0.0.1:1,"+srv.URL)
	require.NoError(t, err)
	require.Contains(t, out, "kvd serve --name n4 --peer-addr 127.0.0.1:11294 --join "+srv.URL+"\n")
}
