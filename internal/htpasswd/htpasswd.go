// Package htpasswd owns editing an htpasswd file of bcrypt hashes, the
// --auth-file kvd serves from: `kvd certs htpasswd` adds or replaces one
// user's line, since the FROM-scratch image has no Apache htpasswd. Reading
// and enforcing the file is the server's business, not this package's; the
// rules here (user names, one line per user) are the ones the server's
// reader accepts. Called from the CLI's goroutine; no state.
package htpasswd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/crypto/bcrypt"

	"github.com/kvd-project/kvd/internal/atomicfile"
)

// Mode is the file's mode: hashes are slow to crack, not impossible.
const Mode os.FileMode = 0o600

// CheckUser refuses a user name the server could never authenticate: an
// empty one, one with ':' (the field separator) and one with whitespace or
// control characters (the memcache text protocol's "user password" token
// splits on the first space).
func CheckUser(user string) error {
	if user == "" {
		return errors.New("user name must not be empty")
	}
	for i := 0; i < len(user); i++ {
		switch c := user[i]; {
		case c == ':':
			return errors.New("user name must not contain ':'")
		case c <= ' ' || c == 0x7f:
			return errors.New("user name must not contain spaces or control characters")
		}
	}
	return nil
}

// Hash returns password's bcrypt hash at cost. The password never appears
// in an error.
func Hash(password []byte, cost int) ([]byte, error) {
	if len(password) == 0 {
		return nil, errors.New("password must not be empty")
	}
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		return nil, fmt.Errorf("bcrypt cost %d out of range [%d, %d]", cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	hash, err := bcrypt.GenerateFromPassword(password, cost)
	if errors.Is(err, bcrypt.ErrPasswordTooLong) {
		// bcrypt reads 72 bytes; a longer password would silently share
		// its hash with every password of the same first 72 bytes.
		return nil, errors.New("password longer than 72 bytes, bcrypt's limit")
	}
	if err != nil {
		return nil, fmt.Errorf("bcrypt: %w", err)
	}
	return hash, nil
}

// Set returns data with user's line set to "user:hash": the first line of
// that user is replaced in place, any later one (which the server would
// refuse as a duplicate) dropped, and if there was none the line is
// appended. Comments, blank lines and other users are kept as they were.
func Set(data []byte, user string, hash []byte) (out []byte, replaced bool, err error) {
	if err := CheckUser(user); err != nil {
		return nil, false, err
	}
	line := append(append([]byte(user), ':'), hash...)
	var buf bytes.Buffer
	rest := data
	for len(rest) > 0 {
		cur, after, found := bytes.Cut(rest, []byte("\n"))
		rest = after
		name, _, _ := bytes.Cut(bytes.TrimSuffix(cur, []byte("\r")), []byte(":"))
		isComment := len(bytes.TrimSpace(cur)) == 0 || bytes.TrimSpace(cur)[0] == '#'
		if !isComment && string(name) == user {
			if replaced {
				continue
			}
			replaced = true
			buf.Write(line)
			buf.WriteByte('\n')
			continue
		}
		buf.Write(cur)
		if found {
			buf.WriteByte('\n')
		} else {
			// The file ended without a newline; the appended line must
			// not be glued to its last one.
			buf.WriteByte('\n')
		}
	}
	if !replaced {
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), replaced, nil
}

// Update sets user's hash in the file at path, creating it if missing, and
// writes it back atomically with mode 0600 (a running kvd re-reads the file
// when it changes: it must never see half of it).
func Update(path, user string, hash []byte) (replaced bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	out, replaced, err := Set(data, user, hash)
	if err != nil {
		return false, err
	}
	if err := atomicfile.Write(path, out, Mode, true); err != nil {
		return false, err
	}
	return replaced, nil
}
