package raftlog

import (
	"fmt"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkSave measures one Save (one synced write to the segment file)
// of n entries of 600 bytes on a real directory; the fsync dominates.
func BenchmarkSave(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			l, _ := openTest(b, Options{})
			data := make([]byte, 600)
			for i := range data {
				data[i] = byte(i)
			}
			b.SetBytes(int64(n * len(data)))
			b.ReportAllocs()
			next := uint64(1)
			for b.Loop() {
				ents := make([]*pb.Entry, n)
				for i := range ents {
					ents[i] = &pb.Entry{Index: new(next), Term: new(uint64(1)), Data: data}
					next++
				}
				if err := l.Save(hardState(1, 1, next-1), ents); err != nil {
					b.Fatal(err)
				}
			}
			st := l.Stats()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(next-1), "ns/entry")
			b.ReportMetric(float64(st.SyncDuration.Nanoseconds())/float64(st.SyncCount), "ns/sync")
		})
	}
}
