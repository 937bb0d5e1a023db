package bench

import (
	"math/rand/v2"
	"testing"
)

func TestChecksummedValues(t *testing.T) {
	src := newBodySource(rand.New(rand.NewPCG(1, 1)), 9000)
	key := []byte("abcd:k12________")
	for _, n := range []int{8, 9, 100, 512, 8192} {
		v := src.makeValue(nil, key, n, uint64(n)*7919)
		if len(v) != n {
			t.Fatalf("len %d, want %d", len(v), n)
		}
		if !checkValue(key, v) {
			t.Fatalf("fresh %d-byte value fails its checksum", n)
		}
		if checkValue([]byte("abcd:k13________"), v) {
			t.Fatalf("%d-byte value verifies under another key", n)
		}
		bad := append([]byte(nil), v...)
		bad[len(bad)-1] ^= 1
		if checkValue(key, bad) && n > checksumLen {
			t.Fatalf("corrupted %d-byte value verifies", n)
		}
		bad = append([]byte(nil), v...)
		bad[0] = 'z'
		if checkValue(key, bad) {
			t.Fatal("value with a non-hex checksum verifies")
		}
		if n > checksumLen && checkValue(key, v[:n-1]) {
			t.Fatal("truncated value verifies")
		}
	}
	if checkValue(key, []byte("1234567")) {
		t.Fatal("7-byte value verifies")
	}
	// Short values are allowed (without --verify) and have the asked length.
	if v := src.makeValue(nil, key, 3, 0); len(v) != 3 {
		t.Fatalf("short value len %d", len(v))
	}
	// Buffers are reused.
	buf := make([]byte, 0, 1024)
	if v := src.makeValue(buf, key, 100, 1); &v[0] != &buf[:1][0] {
		t.Fatal("makeValue did not reuse the buffer")
	}
}
