package config

import "testing"

// FuzzParseSize checks the byte counts of --max-item-size, --cache-size and
// their config keys: it never panics, never accepts a negative or
// overflowed count, and what Size prints (flag defaults, help) reads back.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1048576", "1024k", "1m", "1MiB", "2g", "64MB", "0", "-1", "1t", "", "kib",
		"9223372036854775807", "4611686018427387904", "4294967296g", " 8 k ", "+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 || n > 1<<62 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if back, err := ParseSize(n.String()); err != nil || back != n {
			t.Fatalf("ParseSize(%q) = %d prints as %q, which reads back as %d, %v", s, n, n.String(), back, err)
		}
	})
}
