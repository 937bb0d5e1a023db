package command

import (
	"bytes"
	"testing"
)

// BenchmarkEncodeSet is the encoding of every memcached set: one per write.
func BenchmarkEncodeSet(b *testing.B) {
	c := &Command{Op: OpSet, ReqID: 7, Stamp: 1, Key: bytes.Repeat([]byte("k"), 32), Value: bytes.Repeat([]byte("v"), 512), Flags: 3}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(nil, c); err != nil {
			b.Fatal(err)
		}
	}
}
