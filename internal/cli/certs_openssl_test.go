package cli

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openssl, the tool the certificates replace, accepts them for the purposes
// kvd uses them for, and refuses a client certificate as a server's.
func TestCertsOpensslVerifies(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	dir := t.TempDir()
	_, _, err = runArgs(t, "certs", "cluster", "--out", dir, "--members", "n1,n2,n3")
	require.NoError(t, err)
	_, _, err = runArgs(t, "certs", "client", "app", "--ca-dir", dir)
	require.NoError(t, err)
	ca := filepath.Join(dir, "ca.crt")

	for _, tc := range []struct {
		cert, purpose string
		ok            bool
	}{
		{"n1", "sslserver", true},
		{"n1", "sslclient", true},
		{"n2", "sslserver", true},
		{"n3", "sslclient", true},
		{"client", "sslclient", true},
		{"app", "sslclient", true},
		{"client", "sslserver", false},
		{"app", "sslserver", false},
	} {
		t.Run(tc.cert+"/"+tc.purpose, func(t *testing.T) {
			out, err := exec.Command(openssl, "verify", "-CAfile", ca, "-purpose", tc.purpose, filepath.Join(dir, tc.cert+".crt")).CombinedOutput()
			if tc.ok {
				require.NoError(t, err, "%s", out)
				assert.Contains(t, string(out), ": OK")
			} else {
				require.Error(t, err, "%s", out)
			}
		})
	}

	// The key files parse with openssl too, and each matches its certificate.
	for _, name := range []string{"ca", "n1", "client"} {
		keyPub, err := exec.Command(openssl, "pkey", "-in", filepath.Join(dir, name+".key"), "-pubout").CombinedOutput()
		require.NoError(t, err, "%s", keyPub)
		certPub, err := exec.Command(openssl, "x509", "-in", filepath.Join(dir, name+".crt"), "-noout", "-pubkey").CombinedOutput()
		require.NoError(t, err, "%s", certPub)
		assert.Equal(t, string(certPub), string(keyPub), name)
	}

	// A certificate from another CA does not verify.
	other := t.TempDir()
	_, _, err = runArgs(t, "certs", "cluster", "--out", other, "--members", "n1")
	require.NoError(t, err)
	out, err := exec.Command(openssl, "verify", "-CAfile", ca, filepath.Join(other, "n1.crt")).CombinedOutput()
	require.Error(t, err, "%s", out)
}
