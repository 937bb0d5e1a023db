package migrate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDumpLine(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       DumpEntry
		err        string
	}{
		// As memcached 1.6.18 prints them (a key set as "a%20b" is escaped again).
		{"never expires", "key=a%2520b exp=-1 la=1795878686 cas=1 fetch=no cls=1 size=71", DumpEntry{Key: []byte("a%20b"), Exp: -1, Size: 71}, ""},
		{"expires", "key=k2 exp=1795878786 la=1795878686 cas=2 fetch=no cls=1 size=67", DumpEntry{Key: []byte("k2"), Exp: 1795878786, Size: 67}, ""},
		{"binary key", "key=%00%FF%20+ exp=0 size=1", DumpEntry{Key: []byte{0, 0xff, ' ', '+'}, Exp: 0, Size: 1}, ""},
		{"unknown fields skipped", "cls=1 key=x new=field exp=5 size=9 ", DumpEntry{Key: []byte("x"), Exp: 5, Size: 9}, ""},
		{"no key", "exp=-1 size=3", DumpEntry{}, "required"},
		{"no size", "key=x exp=-1", DumpEntry{}, "required"},
		{"empty key", "key= exp=-1 size=3", DumpEntry{}, "key of 0 bytes"},
		{"bad escape", "key=%zz exp=-1 size=3", DumpEntry{}, "key"},
		{"key too long", "key=" + string(make251()) + " exp=-1 size=3", DumpEntry{}, "key of 251 bytes"},
		{"bad exp", "key=x exp=soon size=3", DumpEntry{}, "exp"},
		{"exp below -1", "key=x exp=-2 size=3", DumpEntry{}, "exp"},
		{"bad size", "key=x exp=1 size=-3", DumpEntry{}, "size"},
		{"field without =", "key=x exp=1 size=3 junk", DumpEntry{}, "no '='"},
		{"an error line", "ERROR locked", DumpEntry{}, "no '='"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDumpLine([]byte(tc.line))
			if tc.err != "" {
				require.ErrorIs(t, err, errDumpLine)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func make251() []byte {
	b := make([]byte, 251)
	for i := range b {
		b[i] = 'k'
	}
	return b
}

// FuzzParseDumpLine: no input panics, and an accepted line's entry
// prints to a line that parses to the same entry.
func FuzzParseDumpLine(f *testing.F) {
	f.Add([]byte("key=a%2520b exp=-1 la=1795878686 cas=1 fetch=no cls=1 size=71"))
	f.Add([]byte("key=%00%FF exp=1795878786 size=67"))
	f.Add([]byte("key=x exp=1 size=3 junk"))
	f.Add([]byte("END"))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseDumpLine(line)
		if err != nil {
			return
		}
		again, err := ParseDumpLine([]byte(formatDumpLine(e)))
		require.NoError(t, err, "formatted %q", formatDumpLine(e))
		require.Equal(t, e, again)
	})
}
