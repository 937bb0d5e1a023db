package replica

import (
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/transport"
)

// forceLog builds an in-memory log bootstrapped with voters, then holding
// ents (index from 1, term 2) committed up to commit.
func forceLog(t *testing.T, voters []uint64, ents []*pb.Entry, commit uint64) *raftlog.Log {
	t.Helper()
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	if voters == nil {
		return l
	}
	require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: voters}))
	for i, e := range ents {
		e.Index, e.Term = new(uint64(i+1)), new(uint64(2))
	}
	require.NoError(t, l.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(commit)}, ents))
	return l
}

func confEntry(t *testing.T, typ pb.ConfChangeType, id uint64) *pb.Entry {
	t.Helper()
	data, err := proto.Marshal(&pb.ConfChange{Type: new(typ), NodeId: new(id)})
	require.NoError(t, err)
	return &pb.Entry{Type: new(pb.EntryConfChange), Data: data}
}

func dataEntry() *pb.Entry { return &pb.Entry{Data: []byte("12345678")} }

// ForceNewCluster appends one change per other member of the
// configuration the whole log reaches (uncommitted entries included) and
// commits everything; it writes nothing for a member already alone, and
// refuses a log that is empty or does not count self among its members.
func TestForceNewCluster(t *testing.T) {
	for _, tc := range []struct {
		name     string
		voters   []uint64 // nil: an empty log
		ents     func(t *testing.T) []*pb.Entry
		commit   uint64
		self     NodeID
		want     Forced
		wantErr  string
		wantConf []pb.ConfChangeType // the types of the appended entries
	}{
		{name: "empty log", self: 1, wantErr: "the raft log is empty"},
		{name: "three voters, two data entries not known committed", voters: []uint64{1, 2, 3}, self: 1, commit: 2,
			ents:     func(*testing.T) []*pb.Entry { return []*pb.Entry{dataEntry(), dataEntry(), dataEntry(), dataEntry()} },
			want:     Forced{Removed: []NodeID{2, 3}, Uncommitted: 2, Index: 6, Term: 2},
			wantConf: []pb.ConfChangeType{pb.ConfChangeRemoveNode, pb.ConfChangeRemoveNode}},
		{name: "a learner added in an uncommitted entry is removed too", voters: []uint64{1, 2, 3}, self: 3, commit: 1,
			ents: func(t *testing.T) []*pb.Entry {
				return []*pb.Entry{dataEntry(), confEntry(t, pb.ConfChangeAddLearnerNode, 4)}
			},
			want:     Forced{Removed: []NodeID{1, 2, 4}, Uncommitted: 1, Index: 5, Term: 2},
			wantConf: []pb.ConfChangeType{pb.ConfChangeRemoveNode, pb.ConfChangeRemoveNode, pb.ConfChangeRemoveNode}},
		{name: "a member removed in the log is not removed again", voters: []uint64{1, 2, 3}, self: 1, commit: 1,
			ents:     func(t *testing.T) []*pb.Entry { return []*pb.Entry{confEntry(t, pb.ConfChangeRemoveNode, 3)} },
			want:     Forced{Removed: []NodeID{2}, Index: 2, Term: 2},
			wantConf: []pb.ConfChangeType{pb.ConfChangeRemoveNode}},
		{name: "a learner survivor is promoted first", voters: []uint64{1, 2}, self: 4, commit: 1,
			ents:     func(t *testing.T) []*pb.Entry { return []*pb.Entry{confEntry(t, pb.ConfChangeAddLearnerNode, 4)} },
			want:     Forced{Removed: []NodeID{1, 2}, Promoted: true, Index: 4, Term: 2},
			wantConf: []pb.ConfChangeType{pb.ConfChangeAddNode, pb.ConfChangeRemoveNode, pb.ConfChangeRemoveNode}},
		{name: "already alone: nothing written", voters: []uint64{1}, self: 1, commit: 1,
			ents: func(*testing.T) []*pb.Entry { return []*pb.Entry{dataEntry()} }},
		{name: "alone with an entry not known committed: committed", voters: []uint64{1}, self: 1, commit: 1,
			ents: func(*testing.T) []*pb.Entry { return []*pb.Entry{dataEntry(), dataEntry()} },
			want: Forced{Uncommitted: 1, Index: 2, Term: 2}},
		{name: "not a member", voters: []uint64{1, 2, 3}, self: 9, commit: 1,
			ents:    func(*testing.T) []*pb.Entry { return []*pb.Entry{dataEntry()} },
			wantErr: "not in its cluster's configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ents []*pb.Entry
			if tc.ents != nil {
				ents = tc.ents(t)
			}
			l := forceLog(t, tc.voters, ents, tc.commit)
			lastBefore, err := l.LastIndex()
			require.NoError(t, err)
			got, err := ForceNewCluster(l, tc.self)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				last, err := l.LastIndex()
				require.NoError(t, err)
				require.Equal(t, lastBefore, last, "a refused force writes nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			hs, _, err := l.InitialState()
			require.NoError(t, err)
			last, err := l.LastIndex()
			require.NoError(t, err)
			if got.Index == 0 {
				require.Equal(t, lastBefore, last, "nothing appended")
				require.Equal(t, tc.commit, hs.GetCommit())
				return
			}
			require.Equal(t, got.Index, last)
			require.Equal(t, got.Index, hs.GetCommit(), "the whole log is committed")
			appended, err := l.Entries(lastBefore+1, last+1, 1<<20)
			require.NoError(t, err)
			var types []pb.ConfChangeType
			for _, e := range appended {
				var cc pb.ConfChange
				require.NoError(t, proto.Unmarshal(e.GetData(), &cc))
				types = append(types, cc.GetType())
			}
			if len(tc.wantConf) > 0 || len(types) > 0 {
				require.Equal(t, tc.wantConf, types)
			}
		})
	}
}

// A member left alone of three never leads; forced, the replica started
// over its log applies the removals, leads alone and commits writes.
func TestForcedReplicaLeadsAlone(t *testing.T) {
	net := transport.NewMemNetwork()
	defer net.Close()
	l := forceLog(t, []uint64{1, 2, 3}, []*pb.Entry{dataEntry(), dataEntry()}, 1)
	_, err := ForceNewCluster(l, 1)
	require.NoError(t, err)
	r, err := New(Config{ID: 1, TickInterval: 10 * time.Millisecond}, l, &echoSM{}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	tr := net.Transport(1, r)
	defer func() { require.NoError(t, tr.Close()) }()
	require.NoError(t, r.Start(tr))
	defer r.Stop()
	require.Eventually(t, func() bool { st := r.Status(); return st.Ready && st.Role == "leader" }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, []NodeID{1}, r.Status().Voters)
	wait := proposeQueued(t, r, 1, 3)
	for i, err := range wait() {
		require.NoError(t, err, "proposal %d", i)
	}
}
