package replica

// logSpan remembers how many bytes of entry data were applied up to points
// of the log, so that compaction can bound the log behind the applied index
// by bytes as well as by entries.
//
// Why bytes: a count alone does not bound the disk the log holds. 15,000
// entries of 512 bytes are 9 MB, of 8 KiB values 125 MB: two segment files
// (raftlog) written, fsynced and kept for the same count. The bound was
// first measured when the log was a Pebble store, where compacting entries
// before their memtable flushed kept them from being written again: unique
// 8 KiB sets at 64 connections on a fresh node, alternating runs, went from
// 6,555-8,087 to 8,037-8,987 sets/s.
type logSpan struct {
	// marks are (index, bytes applied through index) at the end of apply
	// batches since the last compaction, oldest first.
	marks []spanMark
	total uint64 // bytes applied through the last mark
	base  uint64 // total as of the last compaction point
}

type spanMark struct{ index, cum uint64 }

// applied records that the entries after the last mark, up to index, held
// n bytes of data. Indexes only grow: each apply batch follows the last.
func (s *logSpan) applied(index uint64, n int) {
	s.total += uint64(n)
	s.marks = append(s.marks, spanMark{index: index, cum: s.total})
}

// since is how many bytes were applied after the last compaction point, as
// far as the marks know (entries applied before this process started count
// as zero). It is called after every apply, so it must stay O(1).
func (s *logSpan) since() uint64 {
	return s.total - s.base
}

// cumAt is the cumulative byte count at the last mark at or below index.
func (s *logSpan) cumAt(index uint64) uint64 {
	var cum uint64
	for _, m := range s.marks {
		if m.index > index {
			break
		}
		cum = m.cum
	}
	return cum
}

// keepFrom is the lowest mark index such that the entries after it, up to
// durable, hold at most keep bytes: compacting to it leaves at most keep
// bytes behind. It is 0 when the entries after the compaction point, up to
// durable, hold at most keep bytes already (nothing to bound).
//
// The 0 is what makes a compaction happen once per move of durable: the
// lowest mark always qualifies when the span fits, and returning it had the
// log compacted one apply batch further on every apply while the state
// store's flush lagged (each compaction an fsync in the Ready loop: a third
// of the loop's fsyncs under unique 8 KiB sets, bench/RESULTS-core.md).
func (s *logSpan) keepFrom(durable, keep uint64) uint64 {
	end := s.cumAt(durable)
	if end <= s.base+keep {
		return 0
	}
	for _, m := range s.marks {
		if m.index <= durable && end-m.cum <= keep {
			return m.index
		}
	}
	return 0
}

// compacted makes index the new compaction point and forgets the marks at
// or below it, which the log no longer holds.
func (s *logSpan) compacted(index uint64) {
	s.base = s.cumAt(index)
	i := 0
	for i < len(s.marks) && s.marks[i].index <= index {
		i++
	}
	s.marks = append(s.marks[:0], s.marks[i:]...)
}

// reset forgets everything, after a snapshot replaced the log.
func (s *logSpan) reset() {
	*s = logSpan{marks: s.marks[:0]}
}
