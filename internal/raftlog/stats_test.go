package raftlog

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// stallFS hands out files whose SyncData waits on release while stalled is
// set: a disk that stopped answering.
type stallFS struct {
	vfs.FS
	stalled atomic.Bool
	entered chan struct{}
	release chan struct{}
}

type stallFile struct {
	vfs.File
	fs *stallFS
}

func (s *stallFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &stallFile{File: f, fs: s}, nil
}

func (s *stallFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return s.wrap(s.FS.Create(name, cat))
}

func (s *stallFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return s.wrap(s.FS.OpenReadWrite(name, cat, opts...))
}

func (f *stallFile) SyncData() error {
	if f.fs.stalled.Load() {
		f.fs.entered <- struct{}{}
		<-f.fs.release
	}
	return f.File.SyncData()
}

// A metrics scrape calls Stats while the Ready loop may be in an fsync that
// does not return: Stats must answer at once, with the figures of the last
// write and how long the fsync has been running.
func TestStatsDoNotWaitForAStalledFsync(t *testing.T) {
	fs := &stallFS{FS: vfs.NewMem(), entered: make(chan struct{}), release: make(chan struct{})}
	l, _ := openTest(t, Options{FS: fs})
	require.NoError(t, l.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(0))}, entries(1, 5, 1)))
	before := l.Stats()
	require.Equal(t, uint64(5), before.LastIndex)
	require.Zero(t, before.SyncInProgress)
	require.NotZero(t, before.DiskBytes)

	fs.stalled.Store(true)
	saved := make(chan error, 1)
	go func() { saved <- l.Save(nil, entries(6, 8, 1)) }()
	<-fs.entered // the writer holds the log's lock, in its fsync

	stats := make(chan Stats, 1)
	go func() { stats <- l.Stats() }()
	var during Stats
	select {
	case during = <-stats:
	case <-time.After(30 * time.Second):
		t.Fatal("Stats waited for the stalled fsync")
	}
	require.Equal(t, before.LastIndex, during.LastIndex, "figures of the last completed write")
	require.Equal(t, before.SyncCount, during.SyncCount)
	require.Positive(t, during.SyncInProgress)

	fs.stalled.Store(false)
	close(fs.release)
	require.NoError(t, <-saved)
	after := l.Stats()
	require.Equal(t, uint64(8), after.LastIndex)
	require.Zero(t, after.SyncInProgress)
	require.Greater(t, after.SyncCount, before.SyncCount)
}
