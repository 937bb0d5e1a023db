package auth

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// Hashes of "secret" at bcrypt's minimum cost, in the three prefixes
// htpasswd -B and other tools write.
var (
	hash2y = mustHash("secret", "$2y$")
	hash2a = mustHash("secret", "$2a$")
	hash2b = mustHash("secret", "$2b$")
)

// mustHash hashes password at bcrypt.MinCost with the given prefix (Go
// writes $2a$; the rest of the hash does not depend on the letter).
func mustHash(password, prefix string) string {
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		panic(err)
	}
	return prefix + string(h[4:])
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  string
		users []string
		err   string // a part of the error; "" for none
	}{
		{name: "2y", file: "alice:" + hash2y + "\n", users: []string{"alice"}},
		{name: "2a 2b and no final newline", file: "alice:" + hash2a + "\nbob:" + hash2b, users: []string{"alice", "bob"}},
		{name: "comments blank lines and CRLF", file: "# users\r\n\r\n  \nalice:" + hash2y + "\r\n  # more\n", users: []string{"alice"}},
		{name: "empty file", file: "", err: "no users"},
		{name: "only comments", file: "# nobody\n\n", err: "no users"},
		{name: "no colon", file: "alice\n", err: "line 1: not user:hash"},
		{name: "empty user", file: "\n:" + hash2y + "\n", err: "line 2: empty user name"},
		{name: "user with a space", file: "al ice:" + hash2y + "\n", err: "line 1: user name with a space"},
		{name: "empty hash", file: "alice:\n", err: "line 1: empty hash"},
		{name: "plaintext", file: "alice:secret\n", err: "line 1: plaintext password refused"},
		{name: "MD5 apr1", file: "alice:$apr1$9Cv/OMGj$ZomWQzuQbL.3TRCS81A1g/\n", err: "line 1: MD5 hash refused"},
		{name: "SHA", file: "alice:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n", err: "line 1: SHA hash refused"},
		{name: "SHA-512 crypt", file: "alice:$6$salt$abc\n", err: "line 1: SHA hash refused"},
		{name: "DES crypt", file: "alice:rqXexS6ZhobKA\n", err: "line 1: crypt (DES) hash refused"},
		{name: "unknown scheme", file: "alice:$9$abc\n", err: "line 1: unknown hash scheme"},
		{name: "truncated bcrypt", file: "alice:" + hash2y[:40] + "\n", err: "line 1: malformed bcrypt hash"},
		{name: "bcrypt with junk after", file: "alice:" + hash2y + "x\n", err: "line 1: malformed bcrypt hash"},
		{name: "duplicate user", file: "alice:" + hash2y + "\n#\nalice:" + hash2a + "\n", err: "line 3: duplicate user (first on line 1)"},
		{name: "a bad line after good ones", file: "alice:" + hash2y + "\nbob:hunter2\n", err: "line 2: plaintext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			users, err := parse([]byte(tc.file))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.NotContains(t, err.Error(), "secret", "an error must not quote a password")
				assert.NotContains(t, err.Error(), "hunter2", "an error must not quote a password")
				assert.NotContains(t, err.Error(), "$", "an error must not quote a hash")
				return
			}
			require.NoError(t, err)
			var got []string
			for u, h := range users {
				got = append(got, u)
				assert.NoError(t, bcrypt.CompareHashAndPassword(h, []byte("secret")), "user %s", u)
			}
			assert.ElementsMatch(t, tc.users, got)
		})
	}
}

// FuzzParse: the parser never panics, accepts only bcrypt hashes under
// non-empty user names without spaces, and never quotes a hash (any field
// with a '$') in an error.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"alice:" + hash2y + "\n",
		"# c\r\n\r\nalice:" + hash2a + "\r\nbob:" + hash2b,
		"alice:secret\n",
		"alice:$apr1$9Cv/OMGj$ZomWQzuQbL.3TRCS81A1g/\n",
		"alice:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n",
		"alice:rqXexS6ZhobKA\n",
		":" + hash2y,
		"alice:" + hash2y + "\nalice:" + hash2y,
		"alice:" + hash2y[:59] + "\n",
		"a b:" + hash2y,
		"\x00:\x00\n\xff:$2y$",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		users, err := parse(data)
		if err != nil {
			for _, line := range strings.Split(string(data), "\n") {
				_, field, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
				if ok && strings.Contains(field, "$") && strings.Contains(err.Error(), field) {
					t.Fatalf("error %q quotes a hash field", err)
				}
			}
			if users != nil {
				t.Fatal("users returned with an error")
			}
			return
		}
		if len(users) == 0 {
			t.Fatal("no error for a file without users")
		}
		for u, h := range users {
			if u == "" || !validUser([]byte(u)) {
				t.Fatalf("user %q accepted", u)
			}
			if _, err := bcrypt.Cost(h); err != nil || len(h) != bcryptLen {
				t.Fatalf("hash of %q accepted but not bcrypt: %v", u, err)
			}
		}
	})
}
