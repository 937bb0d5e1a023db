package replica

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/command"
)

func TestWitnessEntries(t *testing.T) {
	enc := func(c command.Command) []byte {
		b, err := command.Encode(nil, &c)
		require.NoError(t, err)
		return b
	}
	set := enc(command.Command{Op: command.OpSet, Key: []byte("k"), Value: make([]byte, 1000)})
	member := enc(command.Command{Op: command.OpMember, Member: command.MemberAttrs{ID: 1, Name: "n1"}})
	version := enc(command.Command{Op: command.OpClusterVersion, ClusterVersion: 3})
	newer := append([]byte{command.Version + 1}, set[1:]...)
	entry := func(i uint64, typ pb.EntryType, data []byte) *pb.Entry {
		return &pb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(2), Type: typ.Enum(), Data: data}
	}
	for _, tc := range []struct {
		name string
		e    *pb.Entry
		keep bool
	}{
		{"a set loses its payload", entry(1, pb.EntryNormal, set), false},
		{"a member's publication is kept", entry(2, pb.EntryNormal, member), true},
		{"a cluster version is kept", entry(3, pb.EntryNormal, version), true},
		{"a configuration change is kept", entry(4, pb.EntryConfChangeV2, []byte{1, 2, 3}), true},
		{"raft's empty entry is kept", entry(5, pb.EntryNormal, nil), true},
		{"an entry of a newer kvd is kept, to stop at", entry(6, pb.EntryNormal, newer), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []*pb.Entry{entry(0, pb.EntryNormal, nil), tc.e}
			orig := proto.Clone(tc.e).(*pb.Entry)
			out := witnessEntries(in)
			require.Len(t, out, 2)
			require.Same(t, in[0], out[0])
			require.True(t, proto.Equal(orig, tc.e), "the entry raft holds is not modified")
			require.Equal(t, tc.e.GetIndex(), out[1].GetIndex())
			require.Equal(t, tc.e.GetTerm(), out[1].GetTerm())
			require.Equal(t, tc.e.GetType(), out[1].GetType())
			if tc.keep {
				require.Same(t, tc.e, out[1])
			} else {
				require.Empty(t, out[1].GetData())
			}
		})
	}
}

func TestWithoutVoteRequests(t *testing.T) {
	msg := func(typ pb.MessageType) *pb.Message { return &pb.Message{Type: typ.Enum()} }
	in := []*pb.Message{msg(pb.MsgPreVote), msg(pb.MsgAppResp), msg(pb.MsgVote), msg(pb.MsgVoteResp), msg(pb.MsgPreVoteResp), msg(pb.MsgHeartbeatResp)}
	var types []pb.MessageType
	for _, m := range withoutVoteRequests(in) {
		types = append(types, m.GetType())
	}
	require.Equal(t, []pb.MessageType{pb.MsgAppResp, pb.MsgVoteResp, pb.MsgPreVoteResp, pb.MsgHeartbeatResp}, types)
}

func TestRefusesWitness(t *testing.T) {
	const w = 3
	msg := func(typ pb.MessageType, from uint64) *pb.Message {
		return &pb.Message{Type: typ.Enum(), From: proto.Uint64(from), To: proto.Uint64(1), Term: proto.Uint64(5)}
	}
	isWitness := func(id NodeID) bool { return id == w }
	data := &Replica{cfg: Config{IsWitness: isWitness}, logger: slog.New(slog.DiscardHandler)}
	witness := &Replica{cfg: Config{Witness: true, IsWitness: isWitness}, logger: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		name string
		r    *Replica
		m    *pb.Message
		want bool
	}{
		{"a data member ignores a witness's vote request", data, msg(pb.MsgVote, w), true},
		{"and its pre-vote request", data, msg(pb.MsgPreVote, w), true},
		{"a data member's vote request passes", data, msg(pb.MsgVote, 2), false},
		{"a witness's vote answer passes", data, msg(pb.MsgVoteResp, w), false},
		{"a witness's append answer passes", data, msg(pb.MsgAppResp, w), false},
		{"a witness ignores the order to campaign", witness, msg(pb.MsgTimeoutNow, 1), true},
		{"a data member takes it", data, msg(pb.MsgTimeoutNow, 2), false},
		{"a witness answers vote requests", witness, msg(pb.MsgVote, 2), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.r.refusesWitness(tc.m))
		})
	}
}
