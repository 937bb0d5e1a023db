package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A shaping flag the preset does not use names a workload that does use it.
func TestBenchUnusedFlagSuggestsAWorkloadThatUsesIt(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		suggest string
	}{
		{[]string{"--workload", "membrain", "--records", "10"}, "try --workload import"},
		{[]string{"--workload", "keyspace-write", "--get-set", "9:1"}, "try --workload custom"},
		{[]string{"--workload", "import", "--keys", "10"}, "try --workload custom"},
	} {
		_, _, err := runBenchArgs(t, append([]string{"--servers", "127.0.0.1:1"}, tc.args...)...)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.suggest, "%v", tc.args)
	}
}
