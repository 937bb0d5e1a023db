package transport_test

import (
	"context"
	"fmt"

	"github.com/kvd-project/kvd/internal/transport"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// printer is a Handler that prints what it is given and signals each Step.
type printer struct{ stepped chan struct{} }

func (p printer) Step(_ context.Context, m *pb.Message) error {
	fmt.Printf("node %d got %s from %d\n", m.GetTo(), m.GetType(), m.GetFrom())
	p.stepped <- struct{}{}
	return nil
}
func (printer) ReportUnreachable(uint64)    {}
func (printer) ReportSnapshot(uint64, bool) {}

// Two nodes of cluster 42 on loopback: node 1 sends node 2 a heartbeat.
func ExampleNewTCP() {
	h := printer{stepped: make(chan struct{}, 1)}
	n2, err := transport.NewTCP(transport.Config{ClusterID: 42, LocalID: 2, ListenAddr: "127.0.0.1:0"}, h, nil)
	if err != nil {
		panic(err)
	}
	defer n2.Close()
	n2.Start()

	n1, err := transport.NewTCP(transport.Config{
		ClusterID:  42,
		LocalID:    1,
		ListenAddr: "127.0.0.1:0",
		Peers:      map[uint64]string{2: n2.Addr()},
	}, h, nil)
	if err != nil {
		panic(err)
	}
	defer n1.Close()
	n1.Start()

	// What the replica's Ready loop does with Ready.Messages:
	n1.Send([]*pb.Message{{
		Type: pb.MsgHeartbeat.Enum(),
		From: proto.Uint64(1),
		To:   proto.Uint64(2),
		Term: proto.Uint64(3),
	}})
	<-h.stepped
	// Output: node 2 got MsgHeartbeat from 1
}

// A partition on an in-memory network: node 3 hears nothing from node 1
// until Heal.
func ExampleMemNetwork_Partition() {
	net := transport.NewMemNetwork()
	defer net.Close()
	h := printer{stepped: make(chan struct{}, 1)}
	n1 := net.Transport(1, h)
	net.Transport(2, h)
	net.Transport(3, h)

	net.Partition([]uint64{1, 2}, []uint64{3})
	heartbeat := func(to uint64) *pb.Message {
		return &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(to)}
	}
	n1.Send([]*pb.Message{heartbeat(3)}) // dropped: crosses the partition
	n1.Send([]*pb.Message{heartbeat(2)})
	<-h.stepped
	net.Heal()
	n1.Send([]*pb.Message{heartbeat(3)})
	<-h.stepped
	// Output:
	// node 2 got MsgHeartbeat from 1
	// node 3 got MsgHeartbeat from 1
}
