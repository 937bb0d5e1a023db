package bench

import (
	"testing"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// TestE2EKvd runs every preset for about a second against a real kvd
// process (one node) and checks the report's counts add up, with every value
// verified — the same check TestE2EMemcached makes against memcached.
func TestE2EKvd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	p := kvdproc.Start(t, t.TempDir())
	E2EPresets(t, "memcache", []string{p.MemcacheAddr})
}

// TestE2EKvdCluster does the same against a 3-node cluster, clients spread
// over all members (writes forwarded to the leader, reads via ReadIndex).
func TestE2EKvdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	procs := kvdproc.StartCluster(t, 3)
	var servers []string
	for _, p := range procs {
		servers = append(servers, p.MemcacheAddr)
	}
	E2EPreset(t, "memcache", servers, "membrain")
	E2EPreset(t, "memcache", servers, "import")
}
