package membership

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
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

// The data members must outnumber the witnesses after every change: a
// witness added, or a data member removed, that would leave them as many
// is refused before anything is proposed; the rest go through.
func TestWitnessChangesKeepDataMembersAhead(t *testing.T) {
	ids := func(names ...string) []replica.NodeID {
		var out []replica.NodeID
		for _, n := range names {
			out = append(out, IDOf(n))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		witnesses []string // of n1, n2, n3 (cluster.json), plus the table's rows
		voters    []string
		learners  []string
		add       *httpapi.MemberInfo
		remove    string
		refused   bool
	}{
		{name: "a witness added to two data members", voters: []string{"n1", "n2"}, add: &httpapi.MemberInfo{Name: "w", PeerAddr: "w:90", Witness: true}},
		{name: "a second witness to 2+1", witnesses: []string{"n3"}, voters: []string{"n1", "n2", "n3"}, add: &httpapi.MemberInfo{Name: "w", PeerAddr: "w:90", Witness: true}, refused: true},
		{name: "a witness to one data member", voters: []string{"n1"}, add: &httpapi.MemberInfo{Name: "w", PeerAddr: "w:90", Witness: true}, refused: true},
		{name: "a witness while a learner joins counts it", witnesses: []string{"n3"}, voters: []string{"n1", "n2", "n3"}, learners: []string{"n4"}, add: &httpapi.MemberInfo{Name: "w", PeerAddr: "w:90", Witness: true}, refused: true},
		{name: "a data member added to 2+1", witnesses: []string{"n3"}, voters: []string{"n1", "n2", "n3"}, add: &httpapi.MemberInfo{Name: "n4", PeerAddr: "n4:90"}},
		{name: "a data member removed from 2+1", witnesses: []string{"n3"}, voters: []string{"n1", "n2", "n3"}, remove: "n2", refused: true},
		{name: "the witness removed from 2+1", witnesses: []string{"n3"}, voters: []string{"n1", "n2", "n3"}, remove: "n3"},
		{name: "a data member removed from 3+1", witnesses: []string{"n3"}, voters: []string{"n1", "n2", "n3", "n4"}, remove: "n2"},
		{name: "a data member removed with no witness", voters: []string{"n1", "n2", "n3"}, remove: "n2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &fakeReplica{st: replica.Status{Role: "leader", Voters: ids(tc.voters...), Learners: ids(tc.learners...)}}
			c := newTestController(rep, &fakeState{rows: []fsm.Member{{ID: uint64(IDOf("n4")), Name: "n4", PeerAddr: "n4:90"}}, version: command.ClusterVersionMax})
			for i, m := range c.file.Members {
				for _, w := range tc.witnesses {
					if m.Name == w {
						c.file.Members[i].Witness = true
					}
				}
			}
			var err error
			if tc.add != nil {
				_, err = c.AddMember(context.Background(), *tc.add)
			} else {
				err = c.RemoveMember(context.Background(), tc.remove, false)
			}
			if tc.refused {
				require.ErrorIs(t, err, kv.ErrWitnessQuorum)
				require.Empty(t, rep.changes, "nothing proposed")
			} else {
				require.NoError(t, err)
				require.Len(t, rep.changes, 1)
			}
		})
	}
}

// A witness is added only once every member knows witnesses.
func TestWitnessNeedsClusterVersion(t *testing.T) {
	rep := &fakeReplica{st: replica.Status{Role: "leader", Voters: []replica.NodeID{IDOf("n1"), IDOf("n2")}}}
	c := newTestController(rep, &fakeState{version: command.ClusterVersionWitness - 1})
	_, err := c.AddMember(context.Background(), httpapi.MemberInfo{Name: "w", PeerAddr: "w:90", Witness: true})
	require.ErrorIs(t, err, kv.ErrClusterVersion)
	require.Empty(t, rep.changes)
}

// A founding witness's row says nothing of its role, cluster.json does; a
// row written by the change that added the member says it, also for a
// founding witness's name removed and added back as a data member.
func TestRolesFromTheTableOverTheFile(t *testing.T) {
	rep := &fakeReplica{st: replica.Status{Role: "leader", Voters: []replica.NodeID{IDOf("n1"), IDOf("n2"), IDOf("n3")}}}
	c := newTestController(rep, &fakeState{version: command.ClusterVersionMax})
	c.file.Members[2].Witness = true
	require.True(t, c.IsWitness(IDOf("n3")), "a founding witness")
	c.state.(*fakeState).rows = []fsm.Member{{ID: uint64(IDOf("n3")), Name: "n3", PeerAddr: "n3:90", HTTPAddr: "n3:80"}}
	require.True(t, c.IsWitness(IDOf("n3")), "after it published its addresses")
	c.state.(*fakeState).rows = []fsm.Member{{ID: uint64(IDOf("n3")), Name: "n3", PeerAddr: "n3:91", Data: true}}
	require.False(t, c.IsWitness(IDOf("n3")), "removed and added back as a data member")
	require.Len(t, c.DataMembers(), 3)
}

// A member registered as one role cannot join as the other.
func TestJoinInAnotherRoleIsRefused(t *testing.T) {
	rep := &fakeReplica{st: replica.Status{Role: "leader", Voters: []replica.NodeID{IDOf("n1"), IDOf("n2"), IDOf("n3")}}}
	c := newTestController(rep, &fakeState{})
	_, err := c.AddMember(context.Background(), httpapi.MemberInfo{Name: "n3", PeerAddr: "n3:90", Witness: true})
	require.ErrorIs(t, err, kv.ErrMemberExists)
	require.ErrorContains(t, err, "added as a data member and asks to join as a witness")
	require.False(t, c.IsWitness(IDOf("n3")))
}

// A witness registered by kvd cluster add joins through a follower: its
// join is not refused as a second witness.
func TestRegisteredWitnessJoinsThroughAFollower(t *testing.T) {
	rep := &fakeReplica{st: replica.Status{Role: "follower", Voters: []replica.NodeID{IDOf("n1"), IDOf("n2")}, Learners: []replica.NodeID{IDOf("w")}}}
	c := newTestController(rep, &fakeState{rows: []fsm.Member{{ID: uint64(IDOf("w")), Name: "w", PeerAddr: "w:90", Witness: true}}, version: command.ClusterVersionMax})
	c.file.Members = c.file.Members[:2]
	_, err := c.AddMember(context.Background(), httpapi.MemberInfo{Name: "w", PeerAddr: "w:90", Witness: true})
	require.NoError(t, err)
	require.Len(t, rep.changes, 1, "passed on to the leader")
}
