package raftlog

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options tunes a Log. The zero value means "all defaults": every zero field
// is replaced by the value from DefaultOptions; negative values are invalid.
type Options struct {
	// BlockCacheBytes is the size in bytes of Pebble's block cache for the raft
	// log. Reads of recent entries are served by the tail cache, so this only
	// helps raft reading old entries (a lagging follower). Default 8 MiB.
	BlockCacheBytes int64

	// MemTableBytes is the size in bytes of one Pebble memtable. Default
	// 64 MiB: entries are deleted a few thousand behind the applied index,
	// so with small entries most die in the memtable and are never flushed
	// or compacted (Pebble's own default is 4 MiB).
	MemTableBytes uint64

	// TailCacheEntries bounds the number of most recent entries kept in memory
	// so that Term and Entries on them (raft reading committed entries back to
	// apply them, or to send them to followers) do not touch Pebble.
	// Default 4096. The cache keeps at most TailCacheEntries entries and at
	// most TailCacheBytes bytes, whichever limit is reached first.
	TailCacheEntries int

	// TailCacheBytes bounds the encoded size in bytes of the entries in the
	// tail cache. Default 64 MiB. An entry larger than this is never cached.
	TailCacheBytes int64

	// ObserveSync, when set, is called with the duration of every fsynced
	// batch commit (successful or not), for a latency histogram. It runs
	// with the log's lock held on the Ready loop's goroutine, so it must
	// return at once; nil: only Stats' count and sum are kept.
	ObserveSync func(time.Duration)

	// FS is the filesystem Pebble runs on. For tests only (for example
	// vfs.NewCrashableMem to simulate a crash); nil means the real disk.
	FS vfs.FS
}

// DefaultOptions returns the options used for every zero field of Options.
func DefaultOptions() Options {
	return Options{
		BlockCacheBytes:  8 << 20,
		MemTableBytes:    64 << 20,
		TailCacheEntries: 4096,
		TailCacheBytes:   64 << 20,
		FS:               vfs.Default,
	}
}

// Validate reports every invalid field at once.
func (o Options) Validate() error {
	var errs []error
	if o.BlockCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("BlockCacheBytes %d is negative", o.BlockCacheBytes))
	}
	if o.TailCacheEntries < 0 {
		errs = append(errs, fmt.Errorf("TailCacheEntries %d is negative", o.TailCacheEntries))
	}
	if o.TailCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("TailCacheBytes %d is negative", o.TailCacheBytes))
	}
	return errors.Join(errs...)
}

// withDefaults returns o with every zero field replaced by its default.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.BlockCacheBytes == 0 {
		o.BlockCacheBytes = d.BlockCacheBytes
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = d.MemTableBytes
	}
	if o.TailCacheEntries == 0 {
		o.TailCacheEntries = d.TailCacheEntries
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = d.TailCacheBytes
	}
	if o.FS == nil {
		o.FS = d.FS
	}
	return o
}
