package metrics_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRequestsTotalHelpSaysWhatIsCounted: kvd_requests_total counts only
// some memcache commands (memcached's hit/miss counts, and cas's badval);
// its help names each of them and each result, and names the storage
// commands that are not counted (cas, a storage command too, is), so
// nobody reads a missing memcache set rate off it.
func TestRequestsTotalHelpSaysWhatIsCounted(t *testing.T) {
	r := newTestRegistry()
	fams, err := r.Gatherer().Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != "kvd_requests_total" {
			continue
		}
		help := f.GetHelp()
		seen := 0
		for _, m := range f.GetMetric() {
			var proto, cmd, result string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "protocol":
					proto = l.GetValue()
				case "command":
					cmd = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			if proto == "memcache" {
				seen++
				require.Contains(t, help, cmd, "the help names memcache command %q", cmd)
				require.Contains(t, help, result, "the help names memcache result %q", result)
				require.NotEqual(t, "set", cmd)
			}
		}
		require.Positive(t, seen)
		// cas is one of memcached's storage commands, and it is counted.
		require.True(t, strings.Contains(help, "not set, add, replace, append or prepend"), help)
		return
	}
	t.Fatal("kvd_requests_total not exposed")
}
