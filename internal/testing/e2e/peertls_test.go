package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	raftpb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/membership"
	"github.com/kvd-project/kvd/internal/testing/kvdproc"
	"github.com/kvd-project/kvd/internal/testing/testpki"
	"github.com/kvd-project/kvd/internal/tlsconf"
	"github.com/kvd-project/kvd/internal/transport"
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

// TestPeerTLSRefusesStrangers: certificates the peer CA signed for
// anything but a member cannot speak raft to any member, follower or
// leader (issue #47). An intruder that knows the cluster ID dials each
// member with a client's certificate (one naming a member, one naming
// itself) and with a server+client certificate naming itself but not
// marked kvd-member:NAME, and sends heartbeats of a far higher term: every
// member refuses it at the handshake, warns, counts it, and the cluster's
// term and leader stay as they were.
func TestPeerTLSRefusesStrangers(t *testing.T) {
	ca := testpki.NewCA(t, "kvd-peer-ca")
	dir := t.TempDir()
	files := map[string]testpki.Files{}
	for _, name := range []string{"n1", "n2", "n3"} {
		files[name] = testpki.WriteFiles(t, dir, name, ca, ca.Issue(t, testpki.Leaf{DNS: []string{name},
			URIs: []string{tlsconf.MemberURI(name).String()}}))
	}
	procs := kvdproc.StartClusterEach(t, 3, func(name string) []string {
		f := files[name]
		return []string{"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA}
	})
	setUntilOK(t, procs[0].MemcacheAddr, "before", "v1", 10*time.Second)
	lead := leaderOf(t, procs)
	before := clusterStatus(t, procs[lead])

	raw, err := os.ReadFile(filepath.Join(procs[0].DataDir, membership.FileName))
	require.NoError(t, err)
	var file membership.File
	require.NoError(t, json.Unmarshal(raw, &file))

	intruders := []struct {
		name string // the member it claims to be
		leaf testpki.Leaf
		want string // what each member logs
	}{
		{"client", testpki.Leaf{CN: "client", ClientOnly: true}, "its certificate is not a member's"},
		{"n4", testpki.Leaf{CN: "n4", DNS: []string{"n4"}, ClientOnly: true}, "its certificate is not a member's"},
		{"intruder", testpki.Leaf{CN: "intruder", DNS: []string{"intruder"}}, "its certificate does not vouch for it"},
	}
	for _, in := range intruders {
		f := testpki.WriteFiles(t, t.TempDir(), in.name, ca, ca.Issue(t, in.leaf))
		src, err := tlsconf.Load(tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, nil)
		require.NoError(t, err)
		peer, err := tlsconf.NewPeer(src, 0)
		require.NoError(t, err)
		self := uint64(membership.IDOf(in.name))
		peers := map[uint64]string{}
		for _, m := range file.Members {
			peers[m.ID] = m.PeerAddr
		}
		tr, err := transport.NewTCP(transport.Config{
			ClusterID: file.ClusterID, LocalID: self, ListenAddr: "127.0.0.1:0", Peers: peers,
			TLS: peer, IDOf: func(n string) uint64 { return uint64(membership.IDOf(n)) },
		}, nopHandler{}, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		tr.Start()
		for range 20 {
			var msgs []*raftpb.Message
			for id := range peers {
				msgs = append(msgs, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(self), To: proto.Uint64(id), Term: proto.Uint64(before.Term + 100)})
			}
			tr.Send(msgs)
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, tr.Close())
		for _, p := range procs {
			waitLog(t, p, in.want, 5*time.Second)
		}
	}

	after := clusterStatus(t, procs[lead])
	require.Equal(t, before.Term, after.Term, "an intruder's heartbeat moved the term")
	require.Equal(t, before.Leader, after.Leader)
	for _, p := range procs {
		require.Equal(t, before.Term, clusterStatus(t, p).Term, "term on %s", p.Name)
		require.NotContains(t, p.Log.String(), fmt.Sprintf("to=%d", membership.IDOf("intruder")), "%s took the intruder for its leader", p.Name)
		require.GreaterOrEqual(t, metricValue(t, p.HTTPAddr, "kvd_raft_peer_tls_refused_total"), float64(len(intruders)), "refusals counted on %s", p.Name)
	}
	setUntilOK(t, procs[lead].MemcacheAddr, "after", "v2", 10*time.Second)
}

// nopHandler takes nothing: no member ever answers an intruder.
type nopHandler struct{}

func (nopHandler) Step(context.Context, *raftpb.Message) error { return nil }
func (nopHandler) ReportUnreachable(uint64)                    {}
func (nopHandler) ReportSnapshot(uint64, bool)                 {}
