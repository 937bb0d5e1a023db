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
	// SegmentBytes is the length a segment file is preallocated to; the
	// log moves on to a new segment when the next write would not fit.
	// Default 64 MiB. A batch larger than a segment gets one of its own,
	// longer than this.
	SegmentBytes int64

	// SpareSegments is how many retired segment files are kept to be
	// written over as new segments, rather than removed: writing over a
	// file whose blocks are allocated makes an fsync cheaper than extending
	// one. Default 2.
	SpareSegments int

	// TailCacheEntries bounds the number of most recent entries kept in memory
	// so that Entries on them (raft reading committed entries back to apply
	// them, or to send them to followers) does not read the disk.
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

	// FS is the filesystem the log is kept on. For tests only (for example
	// vfs.NewCrashableMem to simulate a crash); nil means the real disk.
	FS vfs.FS
}

// DefaultOptions returns the options used for every zero field of Options.
func DefaultOptions() Options {
	return Options{
		SegmentBytes:     64 << 20,
		SpareSegments:    2,
		TailCacheEntries: 4096,
		TailCacheBytes:   64 << 20,
		FS:               vfs.Default,
	}
}

// Validate reports every invalid field at once.
func (o Options) Validate() error {
	var errs []error
	if o.SegmentBytes < 0 {
		errs = append(errs, fmt.Errorf("SegmentBytes %d is negative", o.SegmentBytes))
	}
	if o.SpareSegments < 0 {
		errs = append(errs, fmt.Errorf("SpareSegments %d is negative", o.SpareSegments))
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
	if o.SegmentBytes == 0 {
		o.SegmentBytes = d.SegmentBytes
	}
	if o.SpareSegments == 0 {
		o.SpareSegments = d.SpareSegments
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
