package membership

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/replica"
)

func TestMemberSince(t *testing.T) {
	self := uint64(IDOf("n2"))
	founding := []FileMember{{Name: "n1", ID: uint64(IDOf("n1"))}, {Name: "n2", ID: self}}
	for _, tc := range []struct {
		name  string
		ms    File
		since uint64
		known bool
	}{
		{"founding member", File{Members: founding}, 0, true},
		{"data dir started under a name --initial-cluster did not give", File{Members: founding[:1]}, 0, false},
		{"joined, with the index its join answer gave", File{Members: founding, Bootstrap: []uint64{1, 2}, AddedAt: 4711}, 4711, true},
		// A rejoined founding member is in the bootstrap voters too: only
		// its join decides.
		{"joined, answered by an older kvd", File{Members: founding, Bootstrap: []uint64{self}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{cfg: Config{Name: "n2"}, file: &tc.ms}
			since, known := c.memberSince()
			require.Equal(t, tc.known, known)
			require.Equal(t, tc.since, since)
		})
	}
}

func TestRemovedFrom(t *testing.T) {
	st := func(applied, commit uint64, voters, learners []replica.NodeID) replica.Status {
		return replica.Status{ID: 2, Applied: applied, Commit: commit, Voters: voters, Learners: learners}
	}
	for _, tc := range []struct {
		name    string
		since   uint64
		st      replica.Status
		removed bool
	}{
		{"a voter", 0, st(10, 10, []replica.NodeID{1, 2, 3}, nil), false},
		{"a learner", 0, st(10, 10, []replica.NodeID{1, 3}, []replica.NodeID{2}), false},
		{"a founding member left out, caught up", 0, st(10, 10, []replica.NodeID{1, 3}, nil), true},
		{"left out, but behind its commit index (its re-addition may follow)", 0, st(9, 10, []replica.NodeID{1, 3}, nil), false},
		{"nothing known yet", 0, st(0, 0, nil, nil), false},
		{"a joiner replaying history from before its addition", 50, st(40, 40, []replica.NodeID{1, 3}, nil), false},
		{"a joiner left out after its addition", 50, st(60, 60, []replica.NodeID{1, 3}, nil), true},
		{"a joiner at its addition", 50, st(50, 50, []replica.NodeID{1, 3}, []replica.NodeID{2}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.removed, removedFrom(tc.since, tc.st))
		})
	}
}

func TestLeaderShowsRemoval(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		since, applied, leaderApplied uint64
		removed                       bool
	}{
		{"a founding member that was down at its removal", 0, 100, 250, true},
		{"a joiner the leader has not applied yet", 300, 0, 250, false},
		{"a joiner the leader left out after its addition", 200, 210, 250, true},
		{"a leader that knows no more than this member", 0, 250, 250, false},
		{"a leader behind this member", 0, 300, 250, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.removed, leaderShowsRemoval(tc.since, tc.applied, tc.leaderApplied))
		})
	}
}

// TestLeftCluster: a rejoined member catching up replays its old removal,
// and its commit index trails the leader's, so Status.Removed may show
// between that removal and its re-addition; before the point its
// membership started, that is history, not its removal.
func TestLeftCluster(t *testing.T) {
	self := replica.NodeID(IDOf("n2"))
	founding := []FileMember{{Name: "n1", ID: uint64(IDOf("n1"))}, {Name: "n2", ID: uint64(self)}}
	joined := File{Members: founding, Bootstrap: []uint64{uint64(IDOf("n1")), uint64(self)}, AddedAt: 500}
	others := []replica.NodeID{IDOf("n1")}
	for _, tc := range []struct {
		name string
		ms   File
		st   replica.Status
		left bool
	}{
		{"a rejoined member replaying its old removal", joined,
			replica.Status{ID: self, Applied: 300, Commit: 300, Voters: others, Removed: true}, false},
		{"a rejoined member removed again", joined,
			replica.Status{ID: self, Applied: 600, Commit: 600, Voters: others, Removed: true}, true},
		{"a joiner of unknown start that applied its removal", File{Members: founding, Bootstrap: []uint64{uint64(self)}},
			replica.Status{ID: self, Applied: 300, Commit: 300, Voters: others, Removed: true}, true},
		{"a founding member that applied its removal", File{Members: founding},
			replica.Status{ID: self, Applied: 300, Commit: 300, Voters: others, Removed: true}, true},
		{"a rejoined member at its re-addition", joined,
			replica.Status{ID: self, Applied: 500, Commit: 500, Voters: others, Learners: []replica.NodeID{self}}, false},
		{"a rejoined member that replayed the old incarnation's removal", joined,
			replica.Status{ID: self, Applied: 600, Commit: 600, Voters: append(others, self), RemovedAt: 300}, false},
		{"a founding member removed and added back while it was away", File{Members: founding},
			replica.Status{ID: self, Applied: 600, Commit: 600, Voters: append(others, self), RemovedAt: 300}, true},
		{"a joined member removed after its addition and added back", joined,
			replica.Status{ID: self, Applied: 900, Commit: 900, Voters: append(others, self), RemovedAt: 700}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{cfg: Config{Name: "n2"}, file: &tc.ms, logger: slog.New(slog.DiscardHandler)}
			require.Equal(t, tc.left, c.leftCluster(tc.st))
		})
	}
}

// TestNotMember: which senders a node refuses at the handshake. The
// leader refuses anyone its configuration leaves out; a follower, which may
// lag behind the configuration that added its new leader, refuses only
// strangers nobody vouches for (with peer TLS, a certificate not marked
// kvd-member:NAME, such as a client's).
func TestNotMember(t *testing.T) {
	voters := []replica.NodeID{IDOf("n1"), IDOf("n2"), IDOf("n3")}
	member, learner, stranger := uint64(IDOf("n2")), uint64(IDOf("n4")), uint64(IDOf("client"))
	tests := []struct {
		name    string
		st      replica.Status
		from    uint64
		vouched bool
		refuse  bool
		joiner  bool
	}{
		{"leader, member", replica.Status{Role: "leader", Applied: 9, Voters: voters}, member, false, false, false},
		{"leader, learner", replica.Status{Role: "leader", Applied: 9, Voters: voters, Learners: []replica.NodeID{IDOf("n4")}}, learner, false, false, false},
		{"leader, vouched stranger", replica.Status{Role: "leader", Applied: 9, Voters: voters}, stranger, true, true, false},
		{"leader, stranger", replica.Status{Role: "leader", Applied: 9, Voters: voters}, stranger, false, true, false},
		{"follower, member", replica.Status{Role: "follower", Applied: 9, Voters: voters}, member, false, false, false},
		{"follower, vouched stranger (it may be behind)", replica.Status{Role: "follower", Applied: 9, Voters: voters}, stranger, true, false, false},
		{"follower, stranger", replica.Status{Role: "follower", Applied: 9, Voters: voters}, stranger, false, true, false},
		{"candidate, stranger", replica.Status{Role: "candidate", Applied: 9, Voters: voters}, stranger, false, true, false},
		{"nothing applied, a member of cluster.json", replica.Status{Role: "follower"}, member, false, false, false},
		{"nothing applied, stranger", replica.Status{Role: "follower"}, stranger, false, true, false},
		{"joiner replaying, a later leader of cluster.json", replica.Status{Role: "follower", Applied: 9, Voters: []replica.NodeID{IDOf("n2"), IDOf("n3")}}, uint64(IDOf("n4")), false, false, true},
		{"joiner replaying, stranger", replica.Status{Role: "follower", Applied: 9, Voters: []replica.NodeID{IDOf("n2"), IDOf("n3")}}, stranger, false, true, true},
		{"joiner caught up, a stranger again", replica.Status{Role: "follower", Applied: 60, Voters: voters}, uint64(IDOf("n9")), false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestController(&fakeReplica{st: tt.st}, &fakeState{})
			if tt.joiner {
				// n1 joined at index 50 of a cluster founded by n2 and n3,
				// whose leader n4 joined later: cluster.json names them all.
				c.file.Bootstrap = []uint64{uint64(IDOf("n2")), uint64(IDOf("n3"))}
				c.file.AddedAt = 50
				c.file.Members = append(c.file.Members, FileMember{Name: "n4", ID: uint64(IDOf("n4"))})
			}
			applied, refuse := c.notMember(tt.from, tt.vouched)
			require.Equal(t, tt.refuse, refuse)
			if refuse {
				require.Equal(t, tt.st.Applied, applied, "the refusal says as of which index")
			}
		})
	}
}
