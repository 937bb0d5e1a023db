package fsm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// The member table follows membership entries and published attributes, and
// is the same after a reopen (it is cached, but the store is the record).
func TestMemberTable(t *testing.T) {
	dir := t.TempDir()
	f := openTest(t, dir)
	attrs, err := command.Encode(nil, &command.Command{Op: command.OpMember, ReqID: 9, Member: command.MemberAttrs{ID: 1, Name: "n1", HTTPAddr: "h1:80"}})
	require.NoError(t, err)
	_, err = f.Apply([]Entry{
		{Index: 1, Member: &MemberChange{ID: 2, Name: "n2", PeerAddr: "h2:90"}},
		{Index: 2, Data: attrs},
		{Index: 3, Member: &MemberChange{ID: 3, Name: "n3", PeerAddr: "h3:90"}},
		{Index: 4, Member: &MemberChange{ID: 2}}, // promotion keeps name and address
		{Index: 5, Member: &MemberChange{ID: 3, Remove: true}},
	})
	require.NoError(t, err)
	want := []Member{{ID: 1, Name: "n1", HTTPAddr: "h1:80"}, {ID: 2, Name: "n2", PeerAddr: "h2:90"}}
	require.Equal(t, want, f.Members())
	rows, at := f.MembersAt()
	require.Equal(t, want, rows)
	require.Equal(t, uint64(5), at, "the table is published with the index it is current as of")
	require.NoError(t, f.Close())

	f = openTest(t, dir)
	defer f.Close()
	require.Equal(t, want, f.Members())
	_, at = f.MembersAt()
	require.Equal(t, uint64(5), at)
}

// Members is part of the state at the applied index: once AppliedIndex
// reports an entry that changed the table, Members must show the change.
// A reader on another goroutine polls both while membership entries are
// applied one by one (bounded: 300 entries).
func TestMembersVisibleAtTheirAppliedIndex(t *testing.T) {
	f := openTest(t, t.TempDir())
	defer f.Close()
	rs := startReaders(1, func(int) func() error {
		return func() error {
			applied := f.AppliedIndex()
			ms := f.Members()
			// Entry i adds member i: at applied a, members 1..a exist.
			if uint64(len(ms)) < applied {
				return fmt.Errorf("applied index %d, but the member table has %d rows", applied, len(ms))
			}
			return nil
		}
	})
	for i := uint64(1); i <= 300; i++ {
		_, err := f.Apply([]Entry{{Index: i, Member: &MemberChange{ID: i, Name: fmt.Sprint("n", i), PeerAddr: "h:1"}}})
		require.NoError(t, err)
		rs.await(3)
	}
	rs.finish(t)
}
