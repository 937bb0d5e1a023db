package raftlog

import (
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// prefillFS counts the spares prefilled on a MemFS and, when full is set,
// fails their writes with ENOSPC, as a disk with less than a segment free.
type prefillFS struct {
	*vfs.MemFS
	full     bool
	mu       sync.Mutex
	attempts int
}

type fullFile struct{ vfs.File }

func (f fullFile) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

func (p *prefillFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := p.MemFS.Create(name, c)
	if err != nil || p.PathBase(name) != prepTempName {
		return f, err
	}
	p.mu.Lock()
	p.attempts++
	p.mu.Unlock()
	if p.full {
		return fullFile{f}, nil
	}
	return f, nil
}

func (p *prefillFS) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts
}

// openPrefilling opens a log on fs that prefills spares as it does on a
// real disk, in a segment large enough for the writes of the test.
func openPrefilling(t *testing.T, fs vfs.FS) *Log {
	t.Helper()
	l, err := Open("/data/raft", nil, Options{FS: fs, SegmentBytes: 64 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	l.mu.Lock()
	l.prefillSpares = true
	l.mu.Unlock()
	return l
}

// saveKiB appends n entries of about 1 KiB, one Save each, letting the
// prefill each starts finish before the next: the segment passes the
// point where prefilling starts (a quarter of it), and only a spare ready
// makes the log move on to another.
func saveKiB(t *testing.T, l *Log, n int) {
	t.Helper()
	data := string(make([]byte, 1000))
	for range n {
		last, err := l.LastIndex()
		require.NoError(t, err)
		require.NoError(t, l.Save(hardState(1, 1, 0), []*pb.Entry{entry(last+1, 1, data)}))
		l.prepWG.Wait()
	}
}

// A spare whose prefill failed (the disk full, say) is not prefilled again
// at every write to the same segment: each attempt wrote zeros until the
// disk was full, making every other writer on it (the state store) fail
// with ENOSPC, and logged a warning per write.
func TestFailedPrefillIsNotRetriedAtEveryWrite(t *testing.T) {
	fs := &prefillFS{MemFS: vfs.NewMem(), full: true}
	l := openPrefilling(t, fs)
	saveKiB(t, l, 40)
	require.Len(t, l.segs, 1, "the writes stay in one segment")
	require.Equal(t, 1, fs.count(), "prefill attempts in one segment")
	require.Empty(t, l.spares)
	names, err := fs.List("/data/raft")
	require.NoError(t, err)
	require.NotContains(t, names, prepTempName, "the failed prefill's file is removed")
}

// A spare is not prefilled when the disk has less free space than two
// segments: writing one would leave the disk (nearly) full for the state
// store, and the log runs without spares, on preallocated segments.
func TestPrefillLeavesANearlyFullDiskAlone(t *testing.T) {
	for _, tc := range []struct {
		avail    uint64
		attempts int
	}{
		{avail: 64 << 10, attempts: 0},
		{avail: 2*(64<<10) - 1, attempts: 0},
		{avail: 1 << 30, attempts: 1},
	} {
		t.Run(fmt.Sprint(tc.avail), func(t *testing.T) {
			mem := vfs.NewMem()
			mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: tc.avail, TotalBytes: 1 << 40})
			fs := &prefillFS{MemFS: mem}
			l := openPrefilling(t, fs)
			saveKiB(t, l, 40)
			require.Equal(t, tc.attempts, fs.count(), "prefill attempts")
			// The spare prefilled is taken at the next write.
			require.Len(t, l.segs, 1+tc.attempts, "segments")
		})
	}
}
