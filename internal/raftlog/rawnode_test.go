package raftlog

import (
	"fmt"
	"io"
	"log"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// singleNode drives a one-voter raft.RawNode on a Log the way the replica's
// Ready loop does (persist, apply, advance), with no clock: Campaign makes it
// leader at once.
type singleNode struct {
	t       *testing.T
	l       *Log
	rn      *raft.RawNode
	applied []string
	last    uint64 // last applied index
}

func startSingleNode(t *testing.T, l *Log, applied uint64) *singleNode {
	t.Helper()
	rn, err := raft.NewRawNode(&raft.Config{
		ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: l,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, Applied: applied,
		Logger: &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)},
	})
	require.NoError(t, err)
	n := &singleNode{t: t, l: l, rn: rn, last: applied}
	require.NoError(t, rn.Campaign())
	n.drain()
	require.Equal(t, raft.StateLeader, rn.Status().RaftState)
	return n
}

func (n *singleNode) drain() {
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		require.True(n.t, raft.IsEmptySnap(rd.Snapshot))
		require.NoError(n.t, n.l.Save(rd.HardState, rd.Entries))
		for _, e := range rd.CommittedEntries {
			if e.GetType() == pb.EntryType_EntryNormal && len(e.GetData()) > 0 {
				n.applied = append(n.applied, string(e.GetData()))
			}
			n.last = e.GetIndex()
		}
		n.rn.Advance(rd)
	}
}

func (n *singleNode) propose(cmd string) {
	require.NoError(n.t, n.rn.Propose([]byte(cmd)))
	n.drain()
}

// The raft library runs on a Log: bootstrap, elect, commit, compact,
// restart from disk, keep going.
func TestDrivesRaft(t *testing.T) {
	opts := Options{TailCacheEntries: 8}
	l, dir := openTest(t, opts)
	require.True(t, l.IsEmpty())
	require.NoError(t, l.Bootstrap(confState(1)))

	n := startSingleNode(t, l, 0)
	var want []string
	for i := range 30 {
		cmd := fmt.Sprintf("cmd-%d", i)
		want = append(want, cmd)
		n.propose(cmd)
	}
	require.Equal(t, want, n.applied)
	require.NoError(t, l.Compact(n.last-10, nil))
	term := n.rn.Status().GetTerm()
	applied := n.last
	require.NoError(t, l.Close())

	l = reopenTest(t, dir, opts)
	require.False(t, l.IsEmpty())
	hs, _, err := l.InitialState()
	require.NoError(t, err)
	require.Equal(t, term, hs.GetTerm())
	require.Equal(t, applied, hs.GetCommit())

	n = startSingleNode(t, l, applied)
	require.Greater(t, n.rn.Status().GetTerm(), term)
	n.propose("after-restart")
	require.Equal(t, []string{"after-restart"}, n.applied)
	ents, err := l.Entries(applied+1, n.last+1, ^uint64(0))
	require.NoError(t, err)
	require.Equal(t, "after-restart", string(ents[len(ents)-1].GetData()))
}
