package raftlog

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// openTest opens a log in a fresh temporary directory and closes it at the
// end of the test.
func openTest(t testing.TB, opts Options) (*Log, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "raft")
	return reopenTest(t, dir, opts), dir
}

func reopenTest(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, nil, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func entry(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryType_EntryNormal.Enum(), Data: []byte(data)}
}

// entries returns entries lo..hi inclusive, all of the given term.
func entries(lo, hi, term uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := lo; i <= hi; i++ {
		out = append(out, entry(i, term, fmt.Sprintf("data-%d-%d", i, term)))
	}
	return out
}

func hardState(term, vote, commit uint64) *pb.HardState {
	return &pb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func confState(voters ...uint64) *pb.ConfState {
	return &pb.ConfState{Voters: voters, AutoLeave: new(false)}
}

func snapMeta(index, term uint64, cs *pb.ConfState) *pb.SnapshotMetadata {
	return &pb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: cs}
}

// indexes returns the indexes of ents.
func indexes(ents []*pb.Entry) []uint64 {
	out := make([]uint64, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.GetIndex())
	}
	return out
}

// span returns lo..hi inclusive.
func span(lo, hi uint64) []uint64 {
	var out []uint64
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

func requireEntriesEqual(t testing.TB, want, got []*pb.Entry) {
	t.Helper()
	require.Equal(t, len(want), len(got), "entry count: want %v, got %v", indexes(want), indexes(got))
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "entry %d: want %v, got %v", i, want[i], got[i])
	}
}

func requireConfStateEqual(t testing.TB, want, got *pb.ConfState) {
	t.Helper()
	require.NoError(t, pb.EnsureConfState(want).Equivalent(pb.EnsureConfState(got)))
}

// sameErr reports whether a and b are both nil or are the same sentinel.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return errors.Is(a, b) || errors.Is(b, a)
}

// logState is everything a Log answers, for comparing a log before and
// after a reopen or a crash.
type logState struct {
	hs          *pb.HardState
	cs          *pb.ConfState
	first, last uint64
	snap        *pb.SnapshotMetadata
	ents        []*pb.Entry
	empty       bool
}

func captureState(t testing.TB, l *Log) logState {
	t.Helper()
	var s logState
	var err error
	s.hs, s.cs, err = l.InitialState()
	require.NoError(t, err)
	s.first, err = l.FirstIndex()
	require.NoError(t, err)
	s.last, err = l.LastIndex()
	require.NoError(t, err)
	snap, err := l.Snapshot()
	require.NoError(t, err)
	s.snap = snap.GetMetadata()
	if s.last >= s.first {
		s.ents, err = l.Entries(s.first, s.last+1, ^uint64(0))
		require.NoError(t, err)
	}
	s.empty = l.IsEmpty()
	return s
}

func requireSameState(t testing.TB, want, got logState) {
	t.Helper()
	require.True(t, proto.Equal(want.hs, got.hs), "hard state: want %v, got %v", want.hs, got.hs)
	requireConfStateEqual(t, want.cs, got.cs)
	require.Equal(t, want.first, got.first, "first index")
	require.Equal(t, want.last, got.last, "last index")
	require.Equal(t, want.snap.GetIndex(), got.snap.GetIndex(), "snapshot index")
	require.Equal(t, want.snap.GetTerm(), got.snap.GetTerm(), "snapshot term")
	requireConfStateEqual(t, want.snap.GetConfState(), got.snap.GetConfState())
	requireEntriesEqual(t, want.ents, got.ents)
	require.Equal(t, want.empty, got.empty, "IsEmpty")
}
