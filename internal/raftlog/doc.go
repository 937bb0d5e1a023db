// Package raftlog owns kvd's durable Raft log: the entries, the HardState
// (term, vote, commit) and the compaction point (index, term and ConfState of
// the last entry discarded by log truncation or replaced by a snapshot). It
// implements raft.Storage on a Pebble instance of its own, <data-dir>/raft,
// separate from the state machine's store.
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
// Every writer commits one Pebble batch with pebble.Sync: when Save,
// Compact, ApplySnapshot or Bootstrap returns nil, the change is in the
// fsynced write-ahead log and survives a crash or power loss. When a writer
// returns an error nothing is known about the batch, and the in-memory view
// is left as it was before the call; the caller must treat the error as fatal
// to the process (DESIGN decision 1) and reopen the log after restart.
//
// # On-disk layout (format version 1)
//
//	"v"                    format version (one byte, 1)
//	"h"                    HardState, proto-encoded
//	"c"                    compaction point: SnapshotMetadata{Index, Term, ConfState}, proto-encoded
//	"e" + uint64 BE index  Entry, proto-encoded (big-endian so keys sort in index order)
//
// The log holds entries FirstIndex..LastIndex, contiguous, with FirstIndex ==
// compaction index + 1; Term(FirstIndex-1) answers the compaction point's term
// (raft's dummy-entry convention). Open checks this and reports any
// violation as an error wrapping ErrCorrupt, never a panic.
//
// # Errors
//
// The raft.Storage methods return raft.ErrCompacted and raft.ErrUnavailable
// unwrapped, because the raft library compares them with ==. The writers wrap
// every error with context; use errors.Is to test for raft.ErrCompacted or
// raft.ErrSnapOutOfDate.
package raftlog
