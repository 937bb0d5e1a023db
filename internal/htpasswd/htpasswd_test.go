package htpasswd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/kvd-project/kvd/internal/htpasswd"
)

func TestCheckUser(t *testing.T) {
	for _, tc := range []struct {
		user string
		ok   bool
	}{
		{"alice", true},
		{"app-1@example.com", true},
		{"", false},
		{"a:b", false},
		{"a b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\x7fb", false},
	} {
		err := htpasswd.CheckUser(tc.user)
		assert.Equal(t, tc.ok, err == nil, "%q: %v", tc.user, err)
	}
}

func TestSet(t *testing.T) {
	const h = "$2a$10$hash"
	for _, tc := range []struct {
		name     string
		in       string
		want     string
		replaced bool
	}{
		{"empty file", "", "alice:" + h + "\n", false},
		{"append", "bob:x\n", "bob:x\nalice:" + h + "\n", false},
		{"append after a last line without newline", "bob:x", "bob:x\nalice:" + h + "\n", false},
		{"replace in place", "bob:x\nalice:old\ncarol:y\n", "bob:x\nalice:" + h + "\ncarol:y\n", true},
		{"CRLF line replaced", "alice:old\r\nbob:x\r\n", "alice:" + h + "\nbob:x\r\n", true},
		{"duplicates collapse to one", "alice:a\nbob:x\nalice:b\n", "alice:" + h + "\nbob:x\n", true},
		{"comments and blanks kept", "# users\n\nbob:x\n", "# users\n\nbob:x\nalice:" + h + "\n", false},
		{"a comment naming the user is not a line of it", "#alice:old\n", "#alice:old\nalice:" + h + "\n", false},
		{"prefix of another user is not the user", "alice2:x\n", "alice2:x\nalice:" + h + "\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, replaced, err := htpasswd.Set([]byte(tc.in), "alice", []byte(h))
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(out))
			assert.Equal(t, tc.replaced, replaced)
		})
	}
	_, _, err := htpasswd.Set(nil, "a:b", []byte(h))
	require.Error(t, err)
}

func TestHash(t *testing.T) {
	hash, err := htpasswd.Hash([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	require.NoError(t, bcrypt.CompareHashAndPassword(hash, []byte("s3cret")))
	cost, err := bcrypt.Cost(hash)
	require.NoError(t, err)
	assert.Equal(t, bcrypt.MinCost, cost)

	for _, tc := range []struct {
		name     string
		password string
		cost     int
		want     string
	}{
		{"empty", "", 10, "empty"},
		{"too long", strings.Repeat("Secret-pw", 9), bcrypt.MinCost, "72 bytes"},
		{"cost too low", "Secret-pw", 3, "cost"},
		{"cost too high", "Secret-pw", 32, "cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := htpasswd.Hash([]byte(tc.password), tc.cost)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			if tc.password != "" {
				assert.NotContains(t, err.Error(), tc.password)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "htpasswd")
	replaced, err := htpasswd.Update(path, "alice", []byte("h1"))
	require.NoError(t, err)
	assert.False(t, replaced)
	replaced, err = htpasswd.Update(path, "bob", []byte("h2"))
	require.NoError(t, err)
	assert.False(t, replaced)
	replaced, err = htpasswd.Update(path, "alice", []byte("h3"))
	require.NoError(t, err)
	assert.True(t, replaced)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "alice:h3\nbob:h2\n", string(data))
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, htpasswd.Mode, info.Mode().Perm())
}
