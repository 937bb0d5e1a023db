package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"auth-file":      "KVD_AUTH_FILE",
		"peer-cert-file": "KVD_PEER_CERT_FILE",
		"user":           "KVD_USER",
		"timeout":        "KVD_TIMEOUT",
	} {
		require.Equal(t, want, envName(flag))
	}
}

// The environment sets a flag the command line did not; the command line
// wins over it; a value that does not parse names its variable. kvd
// healthcheck shows which value it took in its error for a bad --timeout,
// and kvd cluster (which has a pre-run hook of its own) in its error for
// bad --endpoints.
func TestEnvSetsFlags(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
	defer ok.Close()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string // "" for success
	}{
		{name: "env sets a flag", env: map[string]string{"KVD_TIMEOUT": "-2s"},
			args: []string{"healthcheck", "--url", ok.URL}, wantErr: "--timeout -2s must be positive"},
		{name: "env sets a string flag", env: map[string]string{"KVD_URL": ok.URL + "/readyz"},
			args: []string{"healthcheck"}},
		{name: "the command line beats env", env: map[string]string{"KVD_TIMEOUT": "-2s"},
			args: []string{"healthcheck", "--url", ok.URL, "--timeout", "3s"}},
		{name: "a bad value names its variable", env: map[string]string{"KVD_TIMEOUT": "soon"},
			args: []string{"healthcheck", "--url", ok.URL}, wantErr: "environment variable KVD_TIMEOUT (for --timeout)"},
		{name: "under a command with its own pre-run hook", env: map[string]string{"KVD_ENDPOINTS": "ftp://x:1"},
			args: []string{"cluster", "status"}, wantErr: `--endpoints: "ftp://x:1"`},
		{name: "a bad bool names its variable", env: map[string]string{"KVD_CLIENT_CERT_AUTH": "maybe"},
			args: []string{"serve"}, wantErr: "KVD_CLIENT_CERT_AUTH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, _, err := runArgs(t, tc.args...)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// For kvd serve the environment sits between the command line and the
// --config file: it beats the file, the command line beats it. The merged
// configuration shows in which values Validate refuses (as in
// TestServeFlagsOverrideConfigFile), without starting a node.
func TestServeEnvBetweenFlagsAndConfigFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kvd.yaml")
	require.NoError(t, os.WriteFile(p, []byte("log-level: loud\nmax-connections: 0\nmax-pending: 0\n"), 0o600))
	t.Setenv("KVD_CONFIG", p)
	t.Setenv("KVD_MAX_CONNECTIONS", "5") // beats the file's 0
	t.Setenv("KVD_LOG_LEVEL", "shout")   // beaten by the flag below
	_, _, err := runArgs(t, "serve", "--log-level", "whisper")
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `log-level "whisper"`, "the command line beats the environment")
	require.NotContains(t, msg, "shout")
	require.Contains(t, msg, "max-pending 0", "the file is read (its path from KVD_CONFIG)")
	require.False(t, strings.Contains(msg, "max-connections"), "the environment beats the file: %s", msg)
}
