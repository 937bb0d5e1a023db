package raftlog

import "time"

// Stats is a point-in-time view of the log for metrics.
type Stats struct {
	// SyncCount is the number of fsynced batch commits (every Save with
	// entries or a new term or vote, Compact, ApplySnapshot, Bootstrap).
	SyncCount uint64
	// SyncDuration is the total time spent in those commits.
	SyncDuration time.Duration
	// DiskBytes is the space the Pebble instance uses on disk, WAL and
	// obsolete files included. Zero after Close.
	DiskBytes uint64
	// FirstIndex and LastIndex bound the entries in the log; FirstIndex is
	// LastIndex+1 when it holds none.
	FirstIndex, LastIndex uint64
	// TailCacheEntries and TailCacheBytes measure the in-memory tail cache.
	TailCacheEntries int
	TailCacheBytes   int64
	// EntryDiskReads counts entries read from Pebble by Entries and Term,
	// that is, tail-cache misses.
	EntryDiskReads uint64
	// CompactionDebt is Pebble's estimate of bytes its compactions are
	// behind; BlockCacheHits and BlockCacheMisses count block cache lookups.
	CompactionDebt                   uint64
	BlockCacheHits, BlockCacheMisses int64
}

// Stats returns the current statistics. Safe to call from any goroutine.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{
		SyncCount:        l.stats.syncCount,
		SyncDuration:     l.stats.syncDuration,
		FirstIndex:       l.firstIndex(),
		LastIndex:        l.lastIndex,
		TailCacheEntries: l.cache.len(),
		TailCacheBytes:   l.cache.bytes,
		EntryDiskReads:   l.stats.entryDiskReads,
	}
	if !l.closed {
		m := l.db.Metrics()
		s.DiskBytes = m.DiskSpaceUsage()
		s.CompactionDebt = m.Compact.EstimatedDebt
		s.BlockCacheHits, s.BlockCacheMisses = m.BlockCache.Hits, m.BlockCache.Misses
	}
	return s
}
