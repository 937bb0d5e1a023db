package memcache_test

import (
	"bufio"
	"bytes"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkPipelinedGet measures the per-request cost of the read path
// (parse, per-command counters and latency histogram, local read, reply) with
// 64 gets in flight on one connection; the fsync-bound write path would hide
// it. Run with -benchtime and compare before/after instrumentation changes.
func BenchmarkPipelinedGet(b *testing.B) {
	n := startNode(b)
	nc, err := net.Dial("tcp", n.MemcacheAddr())
	require.NoError(b, err)
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 64<<10)
	_, err = nc.Write([]byte("set k 0 0 5\r\nhello\r\n"))
	require.NoError(b, err)
	line, err := r.ReadString('\n')
	require.NoError(b, err)
	require.Equal(b, "STORED\r\n", line)

	const depth = 64
	batch := bytes.Repeat([]byte("get k\r\n"), depth)
	// One hit is three lines: VALUE, data, END.
	reply := []byte("VALUE k 0 5\r\nhello\r\nEND\r\n")
	buf := make([]byte, len(reply)*depth)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += depth {
		if _, err := nc.Write(batch); err != nil {
			b.Fatal(err)
		}
		if _, err := readFull(r, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if !bytes.Equal(buf[:len(reply)], reply) {
		b.Fatalf("unexpected reply %q", buf[:len(reply)])
	}
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
