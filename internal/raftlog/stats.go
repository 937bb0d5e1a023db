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
	// SyncInProgress is how long the fsync under way has been running, 0
	// when none is: a disk that stopped answering shows here, not in
	// SyncDuration, which counts fsyncs once they end.
	SyncInProgress time.Duration
}

// published is what the writers last left for Stats; statsMu guards it.
type published struct {
	stats  Stats    // DiskBytes, EntryDiskReads and SyncInProgress not filled
	files  []string // paths of the segment files and spares, for DiskBytes
	seqs   []uint64 // the segment numbers files was built from, then the spares'
	closed bool
}

// unlock publishes the figures Stats returns, then releases l.mu. Every
// writer unlocks with it; readers, which change nothing Stats shows but
// EntryDiskReads (an atomic), use l.mu.Unlock.
func (l *Log) unlock() {
	s := Stats{
		SyncCount:        l.stats.syncCount,
		SyncDuration:     l.stats.syncDuration,
		Segments:         len(l.segs),
		FirstIndex:       l.firstIndex(),
		LastIndex:        l.lastIndex,
		TailCacheEntries: l.cache.len(),
		TailCacheBytes:   l.cache.bytes,
		Compactions:      l.stats.compactions,
	}
	l.statsMu.Lock()
	p := &l.published
	p.stats, p.closed = s, l.closed
	if !l.sameFiles(p.seqs) {
		p.seqs, p.files = p.seqs[:0], nil
		for _, seg := range l.segs {
			p.seqs = append(p.seqs, seg.seq)
			p.files = append(p.files, l.fs.PathJoin(l.dir, segmentName(seg.seq)))
		}
		for _, seq := range l.spares {
			p.seqs = append(p.seqs, seq)
			p.files = append(p.files, l.fs.PathJoin(l.dir, spareName(seq)))
		}
	}
	l.statsMu.Unlock()
	l.mu.Unlock()
}

// sameFiles reports whether seqs lists the live segments, then the spares.
// l.mu held.
func (l *Log) sameFiles(seqs []uint64) bool {
	if len(seqs) != len(l.segs)+len(l.spares) {
		return false
	}
	for i, seg := range l.segs {
		if seqs[i] != seg.seq {
			return false
		}
	}
	for i, seq := range l.spares {
		if seqs[len(l.segs)+i] != seq {
			return false
		}
	}
	return true
}

// Stats returns the statistics as of the last write. Safe to call from any
// goroutine, and it never waits for a write or an fsync in progress.
func (l *Log) Stats() Stats {
	l.statsMu.Lock()
	s, files, closed := l.published.stats, l.published.files, l.published.closed
	l.statsMu.Unlock()
	s.EntryDiskReads = l.entryDiskReads.Load()
	if started := l.syncStarted.Load(); started != 0 {
		s.SyncInProgress = max(time.Since(time.Unix(0, started)), 0)
	}
	if closed {
		return s
	}
	// By name: a file renamed since (a spare taken, a segment retired) is
	// missed by this one call.
	for _, f := range files {
		if fi, err := l.fs.Stat(f); err == nil {
			s.DiskBytes += uint64(fi.Size())
		}
	}
	return s
}
