package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

func scanKeys(t *testing.T, f *FSM, prefix, after string, limit int, nowNs int64) []string {
	t.Helper()
	items, err := f.Scan([]byte(prefix), []byte(after), limit, nowNs)
	require.NoError(t, err)
	keys := make([]string, 0, len(items))
	for _, it := range items {
		keys = append(keys, string(it.Key))
	}
	return keys
}

func TestScan(t *testing.T) {
	f := openTest(t, t.TempDir())
	defer f.Close()
	a := &applier{t: t, f: f}
	for _, k := range []string{"user:2", "user:10", "user:1", "usex", "use", "a", "user\xff", "user\xff\xff"} {
		a.do(set(command.OpSet, k, "v-"+k))
	}
	// Expired (relative 10s at t0) and stored already-expired: hidden.
	exp := set(command.OpSet, "user:3", "soon")
	exp.Exptime = 10
	a.do(exp)

	now := t0
	later := t0 + 11e9
	cases := []struct {
		name          string
		prefix, after string
		limit         int
		now           int64
		want          []string
	}{
		{"prefix in byte order", "user:", "", 100, now, []string{"user:1", "user:10", "user:2", "user:3"}},
		{"expired hidden", "user:", "", 100, later, []string{"user:1", "user:10", "user:2"}},
		{"limit", "user:", "", 2, now, []string{"user:1", "user:10"}},
		{"after is exclusive", "user:", "user:10", 100, later, []string{"user:2"}},
		{"after a missing key", "user:", "user:15", 100, later, []string{"user:2"}},
		{"after before prefix", "user:", "a", 1, now, []string{"user:1"}},
		{"after past prefix", "user:", "v", 10, now, nil},
		{"empty prefix is everything", "", "", 100, later,
			[]string{"a", "use", "user:1", "user:10", "user:2", "user\xff", "user\xff\xff", "usex"}},
		{"prefix ending in 0xff", "user\xff", "", 100, now, []string{"user\xff", "user\xff\xff"}},
		{"no match", "zzz", "", 100, now, nil},
		{"zero limit", "", "", 0, now, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := scanKeys(t, f, tc.prefix, tc.after, tc.limit, tc.now)
			if len(tc.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, got)
		})
	}

	items, err := f.Scan([]byte("user:1"), nil, 1, now)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.Equal(t, command.ScanItem{Key: []byte("user:1"), CAS: 3, Size: len("v-user:1")}, items[0])

	// Flush hides everything; keys stored after it show again.
	a.do(command.Command{Op: command.OpFlush})
	require.Empty(t, scanKeys(t, f, "", "", 100, later))
	a.do(set(command.OpSet, "b", "x"))
	require.Equal(t, []string{"b"}, scanKeys(t, f, "", "", 100, later))
}

func TestPrefixEnd(t *testing.T) {
	require.Equal(t, []byte("e"), prefixEnd([]byte("d")))
	require.Equal(t, []byte("dab"), prefixEnd([]byte("daa")))
	require.Equal(t, []byte("db"), prefixEnd([]byte("da\xff\xff")))
	require.Nil(t, prefixEnd([]byte("\xff")))
}
