package bench

import (
	"slices"
	"testing"
)

// FuzzParseSizeDist checks --value-size: it never panics, what it accepts is
// valid and prints back to itself, and a generator drawing from it (a
// weighted pick, then a uniform size) stays inside it.
func FuzzParseSizeDist(f *testing.F) {
	for _, s := range []string{"512", "64-200", "100:70,1000:25,10000-20000:5", "100:70%,1000:30%",
		"1:1000000,2:1000000", "1:9223372036854775807,2:9223372036854775807", "5-", "-", ":", ",", "0", "1048577"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseSizeDist(s)
		if err != nil {
			return
		}
		if err := d.validate(); err != nil {
			t.Fatalf("ParseSizeDist(%q) accepted an invalid distribution: %v", s, err)
		}
		// A lone range prints without its weight, which then reads as 1.
		back, err := ParseSizeDist(d.String())
		same := len(d) == 1 && len(back) == 1 && back[0].Min == d[0].Min && back[0].Max == d[0].Max
		if err != nil || !same && !slices.Equal(back, d) {
			t.Fatalf("%q prints as %q, which parses to %v, %v", s, d.String(), back, err)
		}
		w, _ := Preset("custom")
		w.GetRatio, w.SetRatio, w.ValueSize = 0, 1, d
		g := testGen(t, w, genMixed, 0, 1, 0)
		var op Op
		for range 32 {
			g.next(&op)
			if n := len(op.Value); n < d.Min() || n > d.Max() {
				t.Fatalf("%q: drew a value of %d bytes, outside [%d, %d]", s, n, d.Min(), d.Max())
			}
		}
	})
}

// FuzzParseRatio checks --get-set: it never panics, and a mix it accepts
// passes validation and drives a generator.
func FuzzParseRatio(f *testing.F) {
	for _, s := range []string{"9:1", "0:1", "1:0", "0:0", "1000000:1000000", "1000001:1",
		"9223372036854775807:1", " 3 : 4 ", "-1:2", "a:b", ":", "9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		get, set, err := ParseRatio(s)
		if err != nil {
			return
		}
		if get < 0 || set < 0 || get > maxWeight || set > maxWeight || get+set == 0 {
			t.Fatalf("ParseRatio(%q) accepted %d:%d", s, get, set)
		}
		w, _ := Preset("custom")
		w.GetRatio, w.SetRatio = get, set
		if err := w.Validate(true, false); err != nil {
			t.Fatalf("ParseRatio(%q) accepted %d:%d, which Validate refuses: %v", s, get, set, err)
		}
		g := testGen(t, w, genMixed, 0, 1, 0)
		var op Op
		for range 32 {
			g.next(&op)
			if op.Kind == OpGet && get == 0 || op.Kind == OpSet && set == 0 {
				t.Fatalf("%d:%d drew a %v", get, set, op.Kind)
			}
		}
	})
}

// FuzzParseConcurrency checks --concurrency: it never panics and what it
// accepts is a non-empty list of distinct levels in [1, 4096].
func FuzzParseConcurrency(f *testing.F) {
	for _, s := range []string{"1,2,4,6,8", "1, 4,16,4", "", "0", "4097", "1,,2", "-1", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		levels, err := ParseConcurrency(s)
		if err != nil {
			return
		}
		if len(levels) == 0 {
			t.Fatalf("ParseConcurrency(%q) accepted an empty list", s)
		}
		seen := map[int]bool{}
		for _, n := range levels {
			if n < 1 || n > 4096 || seen[n] {
				t.Fatalf("ParseConcurrency(%q) = %v", s, levels)
			}
			seen[n] = true
		}
	})
}
