package raftlog

import (
	"errors"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FuzzDecodeEntry feeds arbitrary bytes to the decoder of stored log
// entries, as a torn or bit-rotted value would: it must return ErrCorrupt or
// an entry whose index is the key's, never panic.
func FuzzDecodeEntry(f *testing.F) {
	for _, e := range []*pb.Entry{
		{Index: new(uint64(7)), Term: new(uint64(2)), Type: new(pb.EntryNormal), Data: []byte("\x01\x01payload")},
		{Index: new(uint64(7)), Term: new(uint64(3)), Type: new(pb.EntryConfChange), Data: []byte{8, 1}},
		{Index: new(uint64(8))},
	} {
		b, err := proto.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint64(7), b)
	}
	f.Add(uint64(0), []byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, index uint64, v []byte) {
		e, err := decodeEntry(index, v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if e.GetIndex() != index {
			t.Fatalf("decoded entry has index %d under key %d", e.GetIndex(), index)
		}
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatalf("decoded entry does not re-encode: %v", err)
		}
		again, err := decodeEntry(index, b)
		if err != nil || !proto.Equal(e, again) {
			t.Fatalf("re-encoded entry decodes differently: %v", err)
		}
	})
}
