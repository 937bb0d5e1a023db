package membership

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/replica"
)

// fakeReplica answers from fixed values and records membership changes.
type fakeReplica struct {
	st       replica.Status
	progress map[replica.NodeID]replica.Progress
	changes  []replica.ConfChangeType
	leader   replica.NodeID
	err      error
}

func (f *fakeReplica) Status() replica.Status                        { return f.st }
func (f *fakeReplica) Progress() map[replica.NodeID]replica.Progress { return f.progress }
func (f *fakeReplica) ChangeMember(_ context.Context, _ uint64, typ replica.ConfChangeType, _ replica.NodeID, _ []byte, _ bool) (uint64, error) {
	f.changes = append(f.changes, typ)
	return 42, f.err
}
func (f *fakeReplica) TransferLeadership(context.Context, replica.NodeID) (replica.NodeID, error) {
	return f.leader, f.err
}

// fakeState is a member table and cluster version.
type fakeState struct {
	rows    []fsm.Member
	version uint64
}

func (f *fakeState) Members() []fsm.Member             { return f.rows }
func (f *fakeState) MembersAt() ([]fsm.Member, uint64) { return f.rows, 0 }
func (f *fakeState) ClusterVersion() uint64            { return f.version }

// founders is a three-member cluster.json as n1 holds it.
func founders() *File {
	f := &File{ClusterID: 0xc1}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.Members = append(f.Members, FileMember{Name: n, ID: uint64(IDOf(n)), PeerAddr: n + ":90"})
	}
	return f
}

func newTestController(rep *fakeReplica, state *fakeState) *Controller {
	return &Controller{cfg: Config{Name: "n1"}, logger: slog.New(slog.DiscardHandler), file: founders(), rep: rep, state: state, removed: make(chan struct{})}
}

// A joining node that crashed before saving its membership asks again: the
// leader answers as for a new member, without a second change.
func TestAddMemberAnswersARetriedJoin(t *testing.T) {
	n4 := IDOf("n4")
	rep := &fakeReplica{st: replica.Status{ID: IDOf("n1"), Role: "leader", Applied: 7,
		Voters: []replica.NodeID{IDOf("n1"), IDOf("n2"), IDOf("n3")}, Learners: []replica.NodeID{n4}}}
	state := &fakeState{rows: []fsm.Member{{ID: uint64(n4), Name: "n4", PeerAddr: "n4:90"}}}
	c := newTestController(rep, state)

	info, err := c.AddMember(t.Context(), httpapi.MemberInfo{Name: "n4", PeerAddr: "n4:90"})
	require.NoError(t, err)
	require.Empty(t, rep.changes, "no second configuration change")
	require.Equal(t, uint64(7), info.AddedAt)
	require.Len(t, info.Members, 4)
	require.Len(t, info.BootstrapVoters, 3)

	// Another address under the same name is another member.
	_, err = c.AddMember(t.Context(), httpapi.MemberInfo{Name: "n4", PeerAddr: "elsewhere:90"})
	require.ErrorIs(t, err, kv.ErrMemberExists)

	// A new name is added as a learner.
	info, err = c.AddMember(t.Context(), httpapi.MemberInfo{Name: "n5", PeerAddr: "n5:90"})
	require.NoError(t, err)
	require.Equal(t, []replica.ConfChangeType{replica.AddLearner}, rep.changes)
	require.Equal(t, uint64(42), info.AddedAt)
}

// A joiner whose binary cannot apply the cluster's version is refused
// before anything is proposed.
func TestAddMemberRefusesAnOlderBinary(t *testing.T) {
	rep := &fakeReplica{st: replica.Status{ID: IDOf("n1"), Role: "leader"}}
	c := newTestController(rep, &fakeState{version: 3})
	_, err := c.AddMember(t.Context(), httpapi.MemberInfo{Name: "n9", PeerAddr: "n9:90", MaxClusterVersion: 2})
	require.ErrorIs(t, err, kv.ErrVersionTooOld)
	require.Empty(t, rep.changes)
}

// The operator names members; the replica knows IDs.
func TestTransferLeaderSpeaksNames(t *testing.T) {
	rep := &fakeReplica{leader: IDOf("n2")}
	c := newTestController(rep, &fakeState{})
	info, err := c.TransferLeader(t.Context(), "n2")
	require.NoError(t, err)
	require.Equal(t, "n2", info.Name)

	rep.err = replica.ErrUnknownMember
	_, err = c.TransferLeader(t.Context(), "nobody")
	require.ErrorIs(t, err, replica.ErrUnknownMember)
	require.ErrorContains(t, err, `"nobody"`)
}

// Healthy leaves out the members the leader cannot judge yet.
func TestHealthy(t *testing.T) {
	rep := &fakeReplica{progress: map[replica.NodeID]replica.Progress{
		1: {Active: true}, 2: {Active: false}, 3: {Unknown: true},
	}}
	c := newTestController(rep, &fakeState{})
	require.Equal(t, map[kv.NodeID]bool{1: true, 2: false}, c.Healthy())
	rep.progress = nil
	require.Nil(t, c.Healthy(), "a follower judges nobody")
}
