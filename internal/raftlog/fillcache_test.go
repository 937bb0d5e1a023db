package raftlog

import (
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// readLogFS records every ReadAt made on the files it opens.
type readLogFS struct {
	vfs.FS
	mu    sync.Mutex
	reads map[[2]int64]int // {offset, length} -> count
}

type readLogFile struct {
	vfs.File
	fs *readLogFS
}

func (r *readLogFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &readLogFile{File: f, fs: r}, nil
}

func (r *readLogFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return r.wrap(r.FS.Create(name, cat))
}

func (r *readLogFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return r.wrap(r.FS.OpenReadWrite(name, cat, opts...))
}

func (f *readLogFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	f.fs.reads[[2]int64{off, int64(len(p))}]++
	f.fs.mu.Unlock()
	return f.File.ReadAt(p, off)
}

// Open fills the tail cache with the newest entries, within both of its
// bounds. It must read only the entries the cache keeps: reading
// TailCacheEntries entries (4096 by default) and letting the byte bound
// evict most of them held them all in memory at once, gigabytes at the
// start of a node whose log holds large values.
func TestOpenReadsOnlyTheEntriesItCaches(t *testing.T) {
	mem := vfs.NewMem()
	opts := Options{FS: mem, TailCacheEntries: 64, TailCacheBytes: 4096}
	l, err := Open("raft", nil, opts)
	require.NoError(t, err)
	data := string(make([]byte, 600))
	var ents []*pb.Entry
	for i := uint64(1); i <= 64; i++ {
		ents = append(ents, entry(i, 1, data))
	}
	require.NoError(t, l.Save(hardState(1, 1, 64), ents))
	require.NoError(t, l.Close())

	fs := &readLogFS{FS: mem, reads: map[[2]int64]int{}}
	opts.FS = fs
	l, err = Open("raft", nil, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	st := l.Stats()
	require.Equal(t, 6, st.TailCacheEntries, "six entries of ~610 bytes fit in 4096")

	// Open's replay reads the segment sequentially; the tail cache is
	// filled with one read of each entry's record.
	var read []uint64
	for k, p := range l.pos {
		if fs.reads[[2]int64{p.off, int64(p.n)}] > 0 {
			read = append(read, l.firstIndex()+uint64(k))
		}
	}
	require.Equal(t, span(59, 64), read)

	got, err := l.Entries(1, 65, ^uint64(0))
	require.NoError(t, err)
	requireEntriesEqual(t, ents, got)
}
