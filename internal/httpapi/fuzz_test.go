package httpapi

import (
	"net/url"
	"testing"

	"github.com/kvd-project/kvd/internal/command"
)

// FuzzParseKey checks the URL key decoder: it never panics, what it accepts
// obeys memcached's key rules, and a key escaped by a client decodes back to
// itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"k", "a%20b", "%zz", "%", "user%2F1", "caf%C3%A9", "", "%00", "x%7F"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		key, e := parseKey(raw)
		if e != nil {
			if e.status != 400 {
				t.Fatalf("parseKey(%q): status %d, want 400", raw, e.status)
			}
			return
		}
		if len(key) == 0 || len(key) > command.MaxKeyLen {
			t.Fatalf("parseKey(%q) accepted a key of %d bytes", raw, len(key))
		}
		for _, c := range key {
			if c <= ' ' || c == 0x7f {
				t.Fatalf("parseKey(%q) accepted byte 0x%02x", raw, c)
			}
		}
		again, e := parseKey(url.PathEscape(string(key)))
		if e != nil || string(again) != string(key) {
			t.Fatalf("escaped key %q does not round-trip: %q, %v", key, again, e)
		}
	})
}
