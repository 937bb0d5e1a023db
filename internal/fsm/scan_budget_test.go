package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// withScanBudget sets the per-call budget of ScanPage for one test.
func withScanBudget(t *testing.T, steps int, bytes int64) {
	t.Helper()
	old := scanBudget
	scanBudget.steps, scanBudget.bytes = steps, bytes
	t.Cleanup(func() { scanBudget = old })
}

// hiddenRun stores k:000..k:049, expired by later, and k:050, never
// expiring: a listing of k: at later must step over fifty hidden items to
// find one.
func hiddenRun(t *testing.T) (f *FSM, later int64) {
	t.Helper()
	f = openTest(t, t.TempDir())
	t.Cleanup(func() { f.Close() })
	a := &applier{t: t, f: f}
	for i := range 50 {
		c := set(command.OpSet, fmt.Sprintf("k:%03d", i), "v")
		c.Exptime = 10
		a.do(c)
	}
	a.do(set(command.OpSet, "k:050", "v"))
	return f, t0 + 11e9
}

// A listing used to step over any number of hidden items (expired, or hidden
// by a delayed flush_all) in one call, holding dbMu (which InstallSnapshot
// waits for) and an iterator throughout. ScanPage stops after a budget of
// items examined and says where to resume, even with a page short of limit.
func TestScanPageBoundsItemsExamined(t *testing.T) {
	f, later := hiddenRun(t)
	withScanBudget(t, 8, 1<<30)
	cases := []struct {
		name          string
		prefix, after string
		limit         int
		now           int64
		want          []string
		next          string // "" = nil: the range was read to its end
	}{
		{"hidden run: empty page, cursor", "k:", "", 10, later, nil, "k:007"},
		{"resume after cursor", "k:", "k:007", 10, later, nil, "k:015"},
		{"visible found within budget", "k:", "k:045", 10, later, []string{"k:050"}, ""},
		{"limit reached first", "k:", "", 3, t0, []string{"k:000", "k:001", "k:002"}, "k:002"},
		{"budget reached with visible items", "k:", "", 100, t0,
			[]string{"k:000", "k:001", "k:002", "k:003", "k:004", "k:005", "k:006", "k:007"}, "k:007"},
		{"range ends exactly at the budget", "k:00", "k:001", 100, later, nil, ""},
		{"short range", "k:05", "", 10, later, []string{"k:050"}, ""},
		{"after past the range", "k:", "k:1", 10, later, nil, ""},
		{"after before the prefix", "k:04", "a", 10, t0,
			[]string{"k:040", "k:041", "k:042", "k:043", "k:044", "k:045", "k:046", "k:047"}, "k:047"},
		{"zero limit", "k:", "", 0, t0, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			items, next, err := f.ScanPage([]byte(tc.prefix), []byte(tc.after), tc.limit, tc.now)
			require.NoError(t, err)
			var got []string
			for _, it := range items {
				got = append(got, string(it.Key))
			}
			require.Equal(t, tc.want, got)
			if tc.next == "" {
				require.Nil(t, next)
			} else {
				require.Equal(t, tc.next, string(next))
			}
		})
	}
}

// The byte budget bounds the value bytes one call reads (large values are
// read whole to decode the item's header).
func TestScanPageByteBudget(t *testing.T) {
	f, later := hiddenRun(t)
	withScanBudget(t, 1000, 1) // every item is over budget: one per call
	items, next, err := f.ScanPage([]byte("k:"), nil, 10, later)
	require.NoError(t, err)
	require.Empty(t, items)
	require.Equal(t, "k:000", string(next))
}

// Following the cursor from any prefix and after visits each matching key
// once, in order, and ends: every call moves strictly forward.
func TestScanPageWalkEnds(t *testing.T) {
	f, later := hiddenRun(t)
	withScanBudget(t, 3, 1<<30)
	cases := []struct {
		prefix, after string
		now           int64
		want          int // visible items the walk lists
		calls         int // at most
	}{
		{"k:", "", later, 1, 17},
		{"k:", "", t0, 51, 51},
		{"k:", "k:049", t0, 1, 1},
		{"k:", "k:050", t0, 0, 1},
		{"k:0", "k:", t0, 51, 51},
		{"", "", t0, 51, 51},
		{"k", "k:\xff\xff", t0, 0, 1},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q after %q", tc.prefix, tc.after), func(t *testing.T) {
			var got [][]byte
			after, calls := []byte(tc.after), 0
			for {
				calls++
				require.LessOrEqual(t, calls, tc.calls, "the walk does not end")
				items, next, err := f.ScanPage([]byte(tc.prefix), after, 1, tc.now)
				require.NoError(t, err)
				for _, it := range items {
					require.True(t, bytes.HasPrefix(it.Key, []byte(tc.prefix)))
					if len(got) > 0 {
						require.Positive(t, bytes.Compare(it.Key, got[len(got)-1]), "key order")
					}
					got = append(got, it.Key)
				}
				if next == nil {
					break
				}
				require.Positive(t, bytes.Compare(next, after), "the cursor moves forward")
				after = next
			}
			require.Len(t, got, tc.want)
		})
	}
}

// Scan keeps its contract (up to limit visible items, however many hidden
// ones lie between) while reading the store one bounded page at a time.
func TestScanStepsOverHiddenRunsPageByPage(t *testing.T) {
	f, later := hiddenRun(t)
	withScanBudget(t, 4, 1<<30)
	require.Equal(t, []string{"k:050"}, scanKeys(t, f, "k:", "", 10, later))
	require.Len(t, scanKeys(t, f, "k:", "", 20, t0), 20)
	require.Len(t, scanKeys(t, f, "k:", "k:010", 100, t0), 40)
}
