package ascii

import (
	"github.com/kvd-project/kvd/internal/mcproto"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// splitReader serves data in the chunks whose sizes come from next, so a
// test decides where every Read boundary falls.
type splitReader struct {
	data []byte
	next func() int
}

func (s *splitReader) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := min(max(s.next(), 1), len(p), len(s.data))
	copy(p, s.data[:n])
	s.data = s.data[n:]
	return n, nil
}

// splitLimits let a value bigger than the initial read buffer through and
// swallow one a little bigger.
var splitLimits = mcproto.Limits{MaxItemSize: initialBufSize + 1000}

// splitPipeline has one request of every shape the parser reads, including
// its error paths and the values that take the reader's other buffers: a
// multiget over MaxLine, a value bigger than the initial read buffer, a
// value over MaxItemSize (swallowed) and a bad data chunk.
func splitPipeline() string {
	big := strings.Repeat("0123456789abcdef", (initialBufSize+100)/16)
	var b strings.Builder
	for _, s := range []string{
		"get a\r\n", "gets a b  c\n", "  get   a   \r\n", "gat 10 a b\r\n", "gats -1 a\r\n",
		"get " + strings.TrimSpace(strings.Repeat("key ", 700)) + "\r\n", // 2803 bytes
		"set a 5 0 3\r\nxyz\r\n", "set a 0 0 +2 noreply\r\n\r\n\r\n", "add a 1 2 1\nx\r\n",
		"cas a 0 0 1 99\r\nx\r\n", "append a 0 0 1\r\n\x80\r\n",
		"set big 0 0 " + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n",
		"set huge 0 0 " + strconv.Itoa(splitLimits.MaxItemSize+1) + "\r\n" + strings.Repeat("h", splitLimits.MaxItemSize+1) + "\r\n",
		"set a 0 0 1\r\nx\nget a\r\n", "set a 0 0 4294967295\r\n", "set a 0 0 -1\r\n",
		"incr a 5\r\n", "decr a 1 noreply\r\n", "touch a 10\r\n", "delete a 0 noreply\r\n",
		"flush_all 10\r\n", "verbosity 1\r\n", "version\r\n", "stats items\r\n",
		"get a\x00b c\r\n", "\x80abc\r\n", "bogus\r\n", "\r\n", "quit\r\n",
	} {
		b.WriteString(s)
	}
	return b.String()
}

// TestSplitReads: a pipeline parses the same however TCP cuts it: at every
// single byte boundary of its head, one byte per Read, and in random chunk
// sizes.
func TestSplitReads(t *testing.T) {
	in := splitPipeline()
	want := parseAll(t, strings.NewReader(in), splitLimits)
	require.Equal(t, "quit", want[len(want)-2], "the pipeline parsed to its end: %q", want)

	// One cut at every position: the first few kilobytes hold every small
	// request and the start of the multiget.
	for cut := 1; cut < 4096; cut++ {
		first := true
		r := &splitReader{data: []byte(in), next: func() int {
			if first {
				first = false
				return cut
			}
			return len(in)
		}}
		require.Equal(t, want, parseAll(t, r, splitLimits), "cut at %d", cut)
	}

	assert.Equal(t, want, parseAll(t, iotest.OneByteReader(strings.NewReader(in)), splitLimits), "one byte per read")

	seed := uint64(1)
	for range 20 {
		seed++
		rnd := rand.New(rand.NewPCG(seed, seed))
		sizes := []int{7, 100, 3000, 20000}
		maxChunk := sizes[rnd.IntN(len(sizes))]
		r := &splitReader{data: []byte(in), next: func() int { return 1 + rnd.IntN(maxChunk) }}
		assert.Equal(t, want, parseAll(t, r, splitLimits), "seed %d chunks up to %d", seed, maxChunk)
	}
}

// TestSplitReadsEveryBoundary cuts a short pipeline into two reads at every
// position and into three at every pair of positions.
func TestSplitReadsEveryBoundary(t *testing.T) {
	in := "set a 0 0 3\r\nxyz\r\nget a b\r\nset b 0 0 2 noreply\r\nab\nget b\r\nincr a +1\r\n"
	want := parseAll(t, strings.NewReader(in), splitLimits)
	for i := 1; i < len(in); i++ {
		for j := i; j < len(in); j++ {
			cuts := []int{i, j - i, len(in)}
			r := &splitReader{data: []byte(in), next: func() int {
				n := cuts[0]
				if len(cuts) > 1 {
					cuts = cuts[1:]
				}
				return n
			}}
			require.Equal(t, want, parseAll(t, r, splitLimits), "cuts at %d and %d", i, j)
		}
	}
}
