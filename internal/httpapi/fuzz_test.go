package httpapi

import (
	"net/url"
	"testing"

	"github.com/kvd-project/kvd/internal/command"
)

// FuzzParseKey checks the URL key decoder: it never panics, what it accepts
// obeys the rule it was given (memcached's documented rule for keys PUT
// creates; for keys reads reach, whatever the memcache port can store), and
// a key escaped by a client decodes back to itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"k", "a%20b", "%zz", "%", "user%2F1", "caf%C3%A9", "", "%00", "x%7F", "a%0Ab", "a%09b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, rule := range []keyRule{keyToStore, keyToReach} {
			key, e := parseKey(raw, rule)
			if e != nil {
				if e.status != 400 {
					t.Fatalf("parseKey(%q, %d): status %d, want 400", raw, rule, e.status)
				}
				continue
			}
			if len(key) == 0 || len(key) > command.MaxKeyLen {
				t.Fatalf("parseKey(%q, %d) accepted a key of %d bytes", raw, rule, len(key))
			}
			for _, c := range key {
				if c == ' ' || c == '\n' || rule == keyToStore && (c < ' ' || c == 0x7f) {
					t.Fatalf("parseKey(%q, %d) accepted byte 0x%02x", raw, rule, c)
				}
			}
			again, e := parseKey(url.PathEscape(string(key)), rule)
			if e != nil || string(again) != string(key) {
				t.Fatalf("escaped key %q does not round-trip: %q, %v", key, again, e)
			}
			if _, e := parseKey(raw, keyToReach); rule == keyToStore && e != nil {
				t.Fatalf("parseKey(%q) creates a key reads cannot reach: %v", raw, e.msg)
			}
		}
	})
}
