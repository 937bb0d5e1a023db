package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
	"github.com/kvd-project/kvd/internal/testing/testpki"
)

// TestPeerTLSCluster runs three members that speak mutual TLS to each
// other (issue #47): writes replicate, a leader's death elects another, and
// a member that comes back with a certificate naming another member is
// refused by its peers while the cluster carries on without it.
func TestPeerTLSCluster(t *testing.T) {
	ca := testpki.NewCA(t, "kvd-peer-ca")
	dir := t.TempDir()
	files := map[string]testpki.Files{}
	for _, name := range []string{"n1", "n2", "n3"} {
		files[name] = testpki.WriteFiles(t, dir, name, ca, ca.Issue(t, testpki.Leaf{DNS: []string{name}}))
	}
	procs := kvdproc.StartClusterEach(t, 3, func(name string) []string {
		f := files[name]
		return []string{"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA}
	})

	// A write on one member is read on another.
	setUntilOK(t, procs[0].MemcacheAddr, "over-tls", "v1", 10*time.Second)
	it, err := mcClient(procs[2].MemcacheAddr).Get("over-tls")
	require.NoError(t, err)
	require.Equal(t, "v1", string(it.Value))

	// The leader dies; the other two elect a new one over TLS.
	lead := leaderOf(t, procs)
	old := procs[lead]
	old.Kill()
	procs[lead] = nil
	survivors := make([]*kvdproc.Proc, 0, 2)
	for _, p := range procs {
		if p != nil {
			survivors = append(survivors, p)
		}
	}
	setUntilOK(t, survivors[0].MemcacheAddr, "after-kill", "v2", 15*time.Second)
	newLead := survivors[leaderOf(t, survivors)]
	t.Logf("%s led, then %s", old.Name, newLead.Name)

	// The dead member comes back with a certificate that names another
	// member (same CA, same files, new content): its peers refuse it.
	other := "n1"
	if old.Name == other {
		other = "n2"
	}
	testpki.WriteFiles(t, dir, old.Name, ca, ca.Issue(t, testpki.Leaf{DNS: []string{other}}))
	impostor := old.Relaunch()
	for _, p := range survivors {
		waitLog(t, p, "its certificate does not name the member it claims to be", 15*time.Second)
		waitLog(t, p, fmt.Sprintf("cert_names=[%s]", other), time.Second)
	}

	waitLog(t, impostor, "our certificate does not name the member our handshake claims", 15*time.Second)

	// The cluster stays healthy without it; it learns nothing.
	setUntilOK(t, newLead.MemcacheAddr, "while-refused", "v3", 10*time.Second)
	for _, p := range survivors {
		it, err := mcClient(p.MemcacheAddr).Get("while-refused")
		require.NoError(t, err, "read on %s", p.Name)
		require.Equal(t, "v3", string(it.Value))
	}
	c := mcClient(impostor.MemcacheAddr)
	c.Timeout = 3 * time.Second
	_, err = c.Get("while-refused")
	require.Error(t, err, "the refused member served a write it could not have received")
}
