// Package raftlog owns kvd's durable Raft log: the entries, the HardState
// (term, vote, commit) and the compaction point (index, term and ConfState of
// the last entry discarded by log truncation or replaced by a snapshot). It
// implements raft.Storage on segment files of its own in <data-dir>/raft,
// apart from the state machine's Pebble store.
//
// # Who calls it
//
// The replica's Ready loop, from one goroutine: it calls the writers (Save,
// Compact, ApplySnapshot, Bootstrap) and, through the raft library, the
// raft.Storage readers. Writers must not be called concurrently with each
// other. Stats may be called from any goroutine (a metrics scrape).
//
// # Durability contract
//
// Every writer appends its records to the last segment in one write and
// fsyncs it (Save skips the fsync for a HardState that moves only the commit
// index): when Save, Compact, ApplySnapshot or Bootstrap returns nil, the
// change survives a crash or power loss. When a writer returns an error
// nothing is known about what reached the disk; the caller must treat the
// error as fatal to the process (DESIGN decision 1) and reopen the log after
// restart.
//
// # On-disk layout (format version 2)
//
// The log is a sequence of segment files, wal-<16 hex digits>.seg, numbered
// consecutively. Each is a sequence of records (segment.go):
//
//	CRC-32C (4 bytes) | payload length (4 bytes) | type (1 byte) | payload
//
// Each record's CRC covers its length, type and payload and is chained from
// the CRC of the record before it, starting from a seed derived from the
// segment's number. A segment opens with a header record (format version,
// segment number), then, unless the log is empty, the compaction point and
// the HardState, so that it can be read without the segments before it.
// Then come entries, HardStates, compaction points and snapshots, in the
// order they were written, and a seal when the log moves on to the next
// segment. Replaying them in order rebuilds the log: an entry at or below
// the last index replaces the tail from there, a compaction point drops the
// entries it covers, a snapshot drops them all.
//
// Segment files are preallocated to Options.SegmentBytes. Once the log is
// compacted past every entry in the oldest segments they are retired, and
// kept as spare-<number>.seg to be written over as new segments; a spare is
// also prefilled with zeros in the background on a real disk with two
// segments free, once per segment written at most. Writing over
// allocated blocks within a file's length lets fdatasync skip the file
// system's metadata: that, and no memtable, flush or compaction behind the
// log, is why it is not kept in Pebble (bench/RESULTS-core.md).
//
// # Recovery
//
// Open replays every segment. A segment other than the last must end with a
// seal; the last ends at its first record that is incomplete or fails its
// checksum, which is where a crash left it (records after it were never
// acknowledged: the fsync that would have covered them did not return).
// Stale records in a recycled file fail the chained checksum. Open then
// seals the last segment there and starts a new one, so that bytes a crash
// tore are never read again. A last segment that holds no entry and no
// snapshot (its header records, perhaps HardStates) is instead replaced by
// a new file under the same number, written aside and renamed over it,
// whose header records carry the same state: restarts that write nothing
// do not add a segment file each.
//
// A last segment whose header fails its checksum is what a crash in rotate
// leaves (the header records are fsynced before anything else is written
// to a segment), and is replaced, only if no valid record follows where the
// header ends; otherwise the header was damaged after it was written, and
// Open fails rather than drop what follows it. So it does when a record
// right after a valid header (the compaction point or HardState written
// with it, or the first record of a segment started on an empty log)
// fails its checksum yet the record chained after it checks out: those
// records are fsynced before anything after them is written, so only
// records of the same write, past a lost sector, may follow them torn.
// Further into the last segment, damage is never taken for a torn tail
// (checkTornTail): a record that fails its checksum is the end of the log
// only if nothing chained from it checks out, or if what does could all
// have been written since the last fsync (commit-only HardStates, then one
// write) and a sector of it lost. Otherwise, a valid record follows
// acknowledged data that no crash can have spoiled, and Open fails naming
// the file and the offset, leaving the file as it is. Entries
// must run contiguously from the compaction index + 1 with non-decreasing
// terms, segment numbers must be consecutive, and the HardState's commit
// may not exceed the last index; anything else is reported as an error
// wrapping ErrCorrupt, never a panic.
//
// A log kept in Pebble by format version 1 is converted at Open
// (convert.go).
//
// # Errors
//
// The raft.Storage methods return raft.ErrCompacted and raft.ErrUnavailable
// unwrapped, because the raft library compares them with ==. The writers wrap
// every error with context; use errors.Is to test for raft.ErrCompacted or
// raft.ErrSnapOutOfDate.
package raftlog
