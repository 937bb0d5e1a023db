package memcache_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// pipelined runs b.N requests against a fresh node, depth of them in
// flight on one connection: setup first (its reply setupReply bytes long
// must start with setupWant), then one request repeated, each answered in
// replyLen bytes, the first of which must start with want.
func pipelined(b *testing.B, setup []byte, setupReply int, setupWant, request []byte, replyLen int, want []byte) {
	n := startMetaNode(b) // the meta benchmarks need cluster version 5
	nc, err := net.Dial("tcp", n.MemcacheAddr())
	require.NoError(b, err)
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 64<<10)
	if setup != nil {
		_, err = nc.Write(setup)
		require.NoError(b, err)
		got := make([]byte, setupReply)
		_, err = io.ReadFull(r, got)
		require.NoError(b, err)
		require.True(b, bytes.HasPrefix(got, setupWant), "setup reply %q", got)
	}
	const depth = 64
	batch := bytes.Repeat(request, depth)
	buf := make([]byte, replyLen*depth)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += depth {
		if _, err := nc.Write(batch); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if !bytes.HasPrefix(buf[:replyLen], want) {
		b.Fatalf("unexpected reply %q", buf[:replyLen])
	}
}

// BenchmarkPipelinedGet measures the per-request cost of the read path
// (parse, per-command counters and latency histogram, local read, reply) with
// 64 gets in flight on one connection; the fsync-bound write path would hide
// it. Run with -benchtime and compare before/after instrumentation changes.
func BenchmarkPipelinedGet(b *testing.B) {
	reply := []byte("VALUE k 0 5\r\nhello\r\nEND\r\n") // one hit: VALUE, data, END
	pipelined(b, []byte("set k 0 0 5\r\nhello\r\n"), len("STORED\r\n"), []byte("STORED\r\n"),
		[]byte("get k\r\n"), len(reply), reply)
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

// binarySuccess starts a binary response of opcode with status 0.
func binarySuccess(opcode byte) []byte { return []byte{0x81, opcode, 0, 0, 0, 0, 0, 0} }

// BenchmarkPipelinedGetBinary is BenchmarkPipelinedGet over the binary
// protocol: 64 GetK requests in flight on one connection.
func BenchmarkPipelinedGetBinary(b *testing.B) {
	// One hit: header, 4 bytes of flags, the key, the value.
	pipelined(b, binaryPacket(0x01, []byte("k"), make([]byte, 8), []byte("hello")), 24, binarySuccess(0x01),
		binaryPacket(0x0c, []byte("k"), nil, nil), 24+4+1+5, []byte{0x81, 0x0c, 0, 1, 4, 0, 0, 0})
}

// BenchmarkPipelinedSet and BenchmarkPipelinedSetBinary measure writes, 64
// in flight on one connection (group commit shares fsyncs among them),
// in each protocol.
func BenchmarkPipelinedSet(b *testing.B) {
	pipelined(b, nil, 0, nil, []byte("set k 0 0 5\r\nhello\r\n"), len("STORED\r\n"), []byte("STORED\r\n"))
}

func BenchmarkPipelinedSetBinary(b *testing.B) {
	pipelined(b, nil, 0, nil, binaryPacket(0x01, []byte("k"), make([]byte, 8), []byte("hello")), 24, binarySuccess(0x01))
}

// BenchmarkPipelinedMetaGet and BenchmarkPipelinedMetaSet are
// BenchmarkPipelinedGet and BenchmarkPipelinedSet in meta commands: mg
// with v (a read, like get) and ms (a write through the log, like set).
func BenchmarkPipelinedMetaGet(b *testing.B) {
	reply := []byte("VA 5\r\nhello\r\n")
	pipelined(b, []byte("ms k 5\r\nhello\r\n"), len("HD\r\n"), []byte("HD\r\n"), []byte("mg k v\r\n"), len(reply), reply)
}

func BenchmarkPipelinedMetaSet(b *testing.B) {
	pipelined(b, nil, 0, nil, []byte("ms k 5\r\nhello\r\n"), len("HD\r\n"), []byte("HD\r\n"))
}
