package fsm

import (
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
	require.NoError(t, f.Close())

	f = openTest(t, dir)
	defer f.Close()
	require.Equal(t, want, f.Members())
}
