package metrics_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRequestsTotalHelpSaysWhatIsCounted: kvd_requests_total counts only
// some memcache commands (their hit/miss pairs); its help names each of
// them and says storage commands are not among them, so nobody reads a
// missing memcache set rate off it.
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
			var proto, cmd string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "protocol":
					proto = l.GetValue()
				case "command":
					cmd = l.GetValue()
				}
			}
			if proto == "memcache" {
				seen++
				require.Contains(t, help, cmd, "the help names memcache command %q", cmd)
				require.NotEqual(t, "set", cmd)
			}
		}
		require.Positive(t, seen)
		require.True(t, strings.Contains(help, "no storage commands"), help)
		return
	}
	t.Fatal("kvd_requests_total not exposed")
}
