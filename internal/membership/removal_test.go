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
