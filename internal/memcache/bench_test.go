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

// binaryPacket is one binary-protocol request: opcode, key, extras, value.
func binaryPacket(op byte, key, extras, value []byte) []byte {
	p := make([]byte, 24, 24+len(extras)+len(key)+len(value))
	p[0], p[1] = 0x80, op
	p[2], p[3] = byte(len(key)>>8), byte(len(key))
	p[4] = byte(len(extras))
	total := len(extras) + len(key) + len(value)
	p[8], p[9], p[10], p[11] = byte(total>>24), byte(total>>16), byte(total>>8), byte(total)
	p = append(p, extras...)
	p = append(p, key...)
	return append(p, value...)
}

// BenchmarkPipelinedGetBinary is BenchmarkPipelinedGet over the binary
// protocol: 64 GetK requests in flight on one connection.
func BenchmarkPipelinedGetBinary(b *testing.B) {
	n := startNode(b)
	nc, err := net.Dial("tcp", n.MemcacheAddr())
	require.NoError(b, err)
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 64<<10)
	set := binaryPacket(0x01, []byte("k"), make([]byte, 8), []byte("hello"))
	_, err = nc.Write(set)
	require.NoError(b, err)
	hdr := make([]byte, 24)
	_, err = readFull(r, hdr)
	require.NoError(b, err)
	require.Equal(b, []byte{0, 0}, hdr[6:8], "set status")

	const depth = 64
	batch := bytes.Repeat(binaryPacket(0x0c, []byte("k"), nil, nil), depth)
	// One hit: header, 4 bytes of flags, the key, the value.
	one := 24 + 4 + 1 + 5
	buf := make([]byte, one*depth)
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
	if buf[0] != 0x81 || !bytes.Equal(buf[one-6:one], []byte("khello")) {
		b.Fatalf("unexpected reply %q", buf[:one])
	}
}

// BenchmarkPipelinedSet and BenchmarkPipelinedSetBinary measure writes, 64
// in flight on one connection (group commit shares fsyncs among them),
// in each protocol.
func BenchmarkPipelinedSet(b *testing.B) {
	n := startNode(b)
	nc, err := net.Dial("tcp", n.MemcacheAddr())
	require.NoError(b, err)
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 64<<10)
	const depth = 64
	batch := bytes.Repeat([]byte("set k 0 0 5\r\nhello\r\n"), depth)
	buf := make([]byte, len("STORED\r\n")*depth)
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
	if !bytes.HasPrefix(buf, []byte("STORED\r\n")) {
		b.Fatalf("unexpected reply %q", buf[:8])
	}
}

func BenchmarkPipelinedSetBinary(b *testing.B) {
	n := startNode(b)
	nc, err := net.Dial("tcp", n.MemcacheAddr())
	require.NoError(b, err)
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 64<<10)
	const depth = 64
	batch := bytes.Repeat(binaryPacket(0x01, []byte("k"), make([]byte, 8), []byte("hello")), depth)
	buf := make([]byte, 24*depth)
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
	if buf[0] != 0x81 || buf[6] != 0 || buf[7] != 0 {
		b.Fatalf("unexpected reply %x", buf[:24])
	}
}
