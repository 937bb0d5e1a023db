package httpapi

import (
	"strings"
	"testing"
)

// FuzzParseETags checks the If-Match / If-None-Match reader: it never
// panics, errors are 400s, it never accepts an empty list, a weak tag
// matches nothing where the strong comparison applies, and the tag kvd
// sends (formatETag) reads back as its CAS token.
func FuzzParseETags(f *testing.F) {
	for _, s := range []string{`"42"`, `*`, `W/"7"`, `"1", "2"`, `42`, ``, `,`, `"`, `""`, `W/*`, `"-1"`,
		`"18446744073709551616"`, `"18446744073709551615"`, `"+1"`, `" 1"`, `"1-gzip"`, `W/"1", "2"`, `W/1`} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, header string, weakOK bool) {
		tags, e := parseETags([]string{header}, weakOK)
		if e != nil {
			if e.status != 400 {
				t.Fatalf("parseETags(%q): status %d, want 400", header, e.status)
			}
			return
		}
		if len(tags) == 0 {
			t.Fatalf("parseETags(%q) accepted no tag", header)
		}
		if !weakOK {
			for part := range strings.SplitSeq(header, ",") {
				if !strings.HasPrefix(strings.TrimSpace(part), "W/") {
					continue
				}
				weak, e := parseETags([]string{part}, false)
				if e == nil && (len(weak) != 1 || !weak[0].none) {
					t.Fatalf("parseETags(%q): the weak tag %q reads as %+v, which matches an item", header, part, weak)
				}
			}
		}
		for _, tag := range tags {
			if tag.any || tag.none {
				continue
			}
			back, e := parseETags([]string{formatETag(tag.cas)}, false)
			if e != nil || len(back) != 1 || back[0].cas != tag.cas || back[0].any {
				t.Fatalf("tag %d formats as %s, which reads back as %+v, %v", tag.cas, formatETag(tag.cas), back, e)
			}
		}
	})
}
