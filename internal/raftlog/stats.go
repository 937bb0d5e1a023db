package raftlog

import "time"

// Stats is a point-in-time view of the log for metrics.
type Stats struct {
	// SyncCount is the number of fsyncs of a segment: every Save with
	// entries or a new term or vote, every Compact, ApplySnapshot and
	// Bootstrap, two each time the log moves on to a new segment, and one
	// when Open replaces a last segment that holds no entries.
	SyncCount uint64
	// SyncDuration is the total time spent in those fsyncs.
	SyncDuration time.Duration
	// DiskBytes is the space the segment files take, spares included.
	// Zero after Close.
	DiskBytes uint64
	// Segments is the number of live segment files; spares not counted.
	Segments int
	// FirstIndex and LastIndex bound the entries in the log; FirstIndex is
	// LastIndex+1 when it holds none.
	FirstIndex, LastIndex uint64
	// TailCacheEntries and TailCacheBytes measure the in-memory tail cache.
	TailCacheEntries int
	TailCacheBytes   int64
	// EntryDiskReads counts entries read from segment files by Entries,
	// that is, tail-cache misses.
	EntryDiskReads uint64
	// Compactions counts the Compact calls that discarded entries, each an
	// fsync: about one per flush of the state store is expected, and many
	// more than that is a caller compacting too eagerly.
	Compactions uint64
}

// Stats returns the current statistics. Safe to call from any goroutine.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{
		SyncCount:        l.stats.syncCount,
		SyncDuration:     l.stats.syncDuration,
		Segments:         len(l.segs),
		FirstIndex:       l.firstIndex(),
		LastIndex:        l.lastIndex,
		TailCacheEntries: l.cache.len(),
		TailCacheBytes:   l.cache.bytes,
		EntryDiskReads:   l.stats.entryDiskReads,
		Compactions:      l.stats.compactions,
	}
	if l.closed {
		return s
	}
	for _, seg := range l.segs {
		if fi, err := seg.f.Stat(); err == nil {
			s.DiskBytes += uint64(fi.Size())
		}
	}
	for _, seq := range l.spares {
		if fi, err := l.fs.Stat(l.fs.PathJoin(l.dir, spareName(seq))); err == nil {
			s.DiskBytes += uint64(fi.Size())
		}
	}
	return s
}
