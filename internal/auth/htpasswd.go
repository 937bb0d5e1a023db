package auth

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// errEmpty: a file without a single user would lock every client out;
// that is a mistake, not a configuration.
var errEmpty = errors.New("no users: every client would be refused")

// parse reads an htpasswd file: one "user:hash" a line, the hash bcrypt's
// ($2a$, $2b$ or $2y$, as `htpasswd -B` writes), blank lines and lines
// starting with '#' ignored, a trailing "\r" dropped. It refuses every other
// scheme (plaintext, crypt, MD5, SHA), malformed lines, duplicate users and
// a file without users. Errors name the line, never the hash, a password or
// the user name (which a typo may have turned into a password).
func parse(data []byte) (map[string][]byte, error) {
	users := map[string][]byte{}
	firstLine := map[string]int{}
	for n, line := range bytes.Split(data, []byte("\n")) {
		lineNo := n + 1
		line = bytes.TrimSuffix(line, []byte("\r"))
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		user, hash, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, fmt.Errorf("line %d: not user:hash", lineNo)
		}
		if len(user) == 0 {
			return nil, fmt.Errorf("line %d: empty user name", lineNo)
		}
		if !validUser(user) {
			// The text protocol's "user password" token splits on the
			// first space: such a user could never log in there.
			return nil, fmt.Errorf("line %d: user name with a space or control character", lineNo)
		}
		if err := checkHash(hash); err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if first, dup := firstLine[string(user)]; dup {
			return nil, fmt.Errorf("line %d: duplicate user (first on line %d)", lineNo, first)
		}
		firstLine[string(user)] = lineNo
		users[string(user)] = bytes.Clone(hash)
	}
	if len(users) == 0 {
		return nil, errEmpty
	}
	return users, nil
}

// validUser reports whether user has neither whitespace nor control
// characters.
func validUser(user []byte) bool {
	for _, c := range user {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// checkHash accepts a well-formed bcrypt hash and names the scheme of
// anything else, without quoting it.
func checkHash(hash []byte) error {
	h := string(hash)
	switch {
	case h == "":
		return errors.New("empty hash")
	case strings.HasPrefix(h, "$2a$"), strings.HasPrefix(h, "$2b$"), strings.HasPrefix(h, "$2y$"):
		if _, err := bcrypt.Cost(hash); err != nil || len(hash) != bcryptLen {
			return errors.New("malformed bcrypt hash")
		}
		return nil
	case strings.HasPrefix(h, "$apr1$"), strings.HasPrefix(h, "$1$"):
		return errors.New("MD5 hash refused: only bcrypt (htpasswd -B) is accepted")
	case strings.HasPrefix(h, "{SHA}"), strings.HasPrefix(h, "$5$"), strings.HasPrefix(h, "$6$"):
		return errors.New("SHA hash refused: only bcrypt (htpasswd -B) is accepted")
	case strings.HasPrefix(h, "$"):
		return errors.New("unknown hash scheme refused: only bcrypt (htpasswd -B) is accepted")
	case len(h) == 13 && isCryptAlphabet(h):
		return errors.New("crypt (DES) hash refused: only bcrypt (htpasswd -B) is accepted")
	}
	return errors.New("plaintext password refused: only bcrypt (htpasswd -B) is accepted")
}

// bcryptLen is the length of every bcrypt hash in modular crypt format.
const bcryptLen = 60

// isCryptAlphabet reports whether s is made of crypt(3)'s characters
// ([./0-9A-Za-z]), as a DES crypt hash is.
func isCryptAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '.' || c == '/' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}
