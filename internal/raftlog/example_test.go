package raftlog_test

import (
	"fmt"
	"os"
	"path/filepath"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/raftlog"
)

// A new node opens its log, bootstraps it once, then persists each Ready's
// hard state and entries before sending or applying anything.
func Example() {
	dataDir, err := os.MkdirTemp("", "kvd-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dataDir)

	l, err := raftlog.Open(filepath.Join(dataDir, "raft"), nil, raftlog.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	if l.IsEmpty() {
		if err := l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
			panic(err)
		}
	}

	// In the Ready loop: l.Save(rd.HardState, rd.Entries), fatal on error.
	hs := &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(0))}
	ents := []*pb.Entry{{Index: new(uint64(1)), Term: new(uint64(1))}}
	if err := l.Save(hs, ents); err != nil {
		panic(err)
	}

	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	_, cs, _ := l.InitialState()
	fmt.Println("entries", first, "to", last, "voters", cs.GetVoters())
	// Output: entries 1 to 1 voters [1 2 3]
}
