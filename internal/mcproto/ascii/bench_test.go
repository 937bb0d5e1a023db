package ascii

import (
	"bytes"
	"github.com/kvd-project/kvd/internal/mcproto"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loopReader serves data over and over, like a client pipelining the same
// requests forever, without allocating.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func pipeline(req string, n int) []byte {
	return bytes.Repeat([]byte(req), n)
}

var (
	setReq   = "set user:0000000042 0 0 32\r\n" + strings.Repeat("v", 32) + "\r\n"
	getReq   = "get user:0000000042\r\n"
	multiReq = "gets " + strings.TrimSpace(strings.Repeat("user:0000000042 ", 10)) + "\r\n"
)

// TestNextDoesNotAllocate: in the steady state, small requests parse
// without allocation (the buffers are reused).
func TestNextDoesNotAllocate(t *testing.T) {
	for name, req := range map[string]string{"set": setReq, "get": getReq, "multiget": multiReq,
		"incr": "incr counter 1\r\n", "delete": "delete k noreply\r\n", "cas": "cas k 1 2 3 4\r\nabc\r\n",
		"bigger set": "set k 0 0 9000\r\n" + strings.Repeat("x", 9000) + "\r\n"} {
		pr := NewReader(&loopReader{data: pipeline(req, 7)}, mcproto.Limits{})
		var r mcproto.Request
		for range 100 { // warm up the buffers
			require.NoError(t, pr.Next(&r))
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if err := pr.Next(&r); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, name)
	}
}

func benchmarkNext(b *testing.B, req string) {
	pr := NewReader(&loopReader{data: pipeline(req, 64)}, mcproto.Limits{})
	var r mcproto.Request
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		if err := pr.Next(&r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNextSet(b *testing.B)      { benchmarkNext(b, setReq) }
func BenchmarkNextGet(b *testing.B)      { benchmarkNext(b, getReq) }
func BenchmarkNextMultiget(b *testing.B) { benchmarkNext(b, multiReq) }
func BenchmarkNextSet4K(b *testing.B) {
	benchmarkNext(b, "set k 0 0 4096\r\n"+strings.Repeat("x", 4096)+"\r\n")
}

func BenchmarkAppendValue(b *testing.B) {
	dst := make([]byte, 0, 256)
	key, val := []byte("user:0000000042"), bytes.Repeat([]byte("v"), 32)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendValue(dst[:0], key, 0, val, 12345, true)
		dst = AppendEnd(dst)
	}
}
