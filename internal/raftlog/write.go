package raftlog

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/failpoint"
)

// Save persists hs (unless empty) and ents in one write, fsynced when
// raft's rules need it: new entries, or a new term or vote. A HardState
// that changes only the commit index is written without fsync, as etcd
// does: a commit index lost in a crash is learned again from the leader,
// and the next fsync (records are written in order) makes it durable
// anyway. Followers, which see the commit index move with nearly
// every append, then pay one fsync per append rather than two. ents must be
// contiguous and may start anywhere from
// FirstIndex to LastIndex+1: a conflicting tail (indexes >= ents[0].Index)
// is replaced and any old entries beyond the new last index are deleted.
// Entries at or below the compaction index are skipped (they are already
// part of the snapshot). Save keeps references to ents in its tail cache:
// the caller must not mutate them afterwards (raft never does).
func (l *Log) Save(hs *pb.HardState, ents []*pb.Entry) error {
	l.mu.Lock()
	defer l.unlock()
	if l.closed {
		return fmt.Errorf("raftlog: save: %w", ErrClosed)
	}
	ents, err := l.checkAppend(ents)
	if err != nil {
		return fmt.Errorf("raftlog: save entries: %w", err)
	}
	saveHardState := !isEmptyHardState(hs)
	if !saveHardState && len(ents) == 0 {
		return nil
	}
	newLast := l.lastIndex
	if len(ents) > 0 {
		newLast = ents[len(ents)-1].GetIndex()
	}
	commit := l.hardState.GetCommit()
	if saveHardState {
		commit = hs.GetCommit()
	}
	if commit > newLast {
		// Raft never truncates committed entries nor commits beyond its log;
		// refuse to write a log that Open would reject.
		return fmt.Errorf("raftlog: save entries: commit index %d beyond the new last index %d", commit, newLast)
	}

	recs := make([]pending, 0, len(ents)+1)
	cached := make([]cachedEntry, len(ents))
	for k, e := range ents {
		r := protoRecord(recEntry, e)
		recs = append(recs, r)
		cached[k] = cachedEntry{e: e, size: r.size}
	}
	if saveHardState {
		recs = append(recs, protoRecord(recHardState, hs))
	}
	// A commit-only HardState is written but not fsynced: the next fsync of
	// this file (records are written in order) makes it durable.
	where, err := l.write(recs, false)
	if err != nil {
		return fmt.Errorf("raftlog: save: %w", err)
	}
	if mustSync(hs, l.hardState, len(ents)) {
		failpoint.Hit(failpoint.RaftlogBeforeSync)
		if err := l.sync(l.segs[len(l.segs)-1]); err != nil {
			return fmt.Errorf("raftlog: save: %w", err)
		}
		failpoint.Hit(failpoint.RaftlogAfterSync)
	}
	if len(ents) > 0 {
		// Entries from ents[0] on replace any there were (the records on
		// disk say the same: see recEntry).
		l.pos = l.pos[:ents[0].GetIndex()-l.firstIndex()]
		for k, e := range ents {
			p := where[k]
			p.term = e.GetTerm()
			l.pos = append(l.pos, p)
			p.seg.maxEntry = max(p.seg.maxEntry, e.GetIndex())
		}
	}
	if len(ents) > 0 {
		l.cache.append(cached)
		l.lastIndex = newLast
	}
	if saveHardState {
		l.hardState = proto.Clone(hs).(*pb.HardState)
	}
	l.empty = false
	return nil
}

// mustSync reports whether a Save of hs and n entries must be fsynced before
// raft may act on it: entries and the term and vote a node promised must
// survive a crash; the commit index need not (raft's MustSync).
func mustSync(hs, prev *pb.HardState, n int) bool {
	return n > 0 || hs.GetTerm() != prev.GetTerm() || hs.GetVote() != prev.GetVote()
}

// checkAppend validates entries about to be saved and returns the part of
// them beyond the compaction index. l.mu held.
func (l *Log) checkAppend(ents []*pb.Entry) ([]*pb.Entry, error) {
	if len(ents) == 0 {
		return nil, nil
	}
	start := ents[0].GetIndex()
	for k, e := range ents {
		if e == nil {
			return nil, fmt.Errorf("nil entry at position %d", k)
		}
		if e.GetIndex() != start+uint64(k) {
			return nil, fmt.Errorf("entries not contiguous: index %d at position %d after %d", e.GetIndex(), k, start)
		}
		if k > 0 && e.GetTerm() < ents[k-1].GetTerm() {
			return nil, fmt.Errorf("entry %d has term %d, below the term %d of entry %d",
				e.GetIndex(), e.GetTerm(), ents[k-1].GetTerm(), e.GetIndex()-1)
		}
	}
	if start > l.lastIndex+1 {
		return nil, fmt.Errorf("gap: first new entry %d, last index %d", start, l.lastIndex)
	}
	first := l.firstIndex()
	if start+uint64(len(ents))-1 < first {
		return nil, nil
	}
	if start < first {
		ents = ents[first-start:]
		start = first
	}
	prevTerm, err := l.term(start - 1)
	if err != nil {
		return nil, fmt.Errorf("term of entry %d: %w", start-1, err)
	}
	if t := ents[0].GetTerm(); t < prevTerm {
		return nil, fmt.Errorf("entry %d has term %d, below the term %d of entry %d", start, t, prevTerm, start-1)
	}
	return ents, nil
}

// Compact discards the entries up to and including index, which the state
// machine has durably applied and captured: afterwards FirstIndex is
// index+1 and Term(index) still answers. cs is the configuration as of index;
// nil keeps the one recorded at the previous compaction point. Compacting at
// or below the current compaction point returns an error wrapping
// raft.ErrCompacted; index must be at most LastIndex and at most the saved
// commit index. Synced.
//
// The caller must never compact past the state store's durably synced
// applied index (DESIGN decision 2).
func (l *Log) Compact(index uint64, cs *pb.ConfState) error {
	l.mu.Lock()
	defer l.unlock()
	if l.closed {
		return fmt.Errorf("raftlog: compact: %w", ErrClosed)
	}
	if index <= l.compaction.GetIndex() {
		return fmt.Errorf("raftlog: compact to %d (compaction index %d): %w", index, l.compaction.GetIndex(), raft.ErrCompacted)
	}
	if index > l.lastIndex {
		return fmt.Errorf("raftlog: compact to %d beyond last index %d: %w", index, l.lastIndex, raft.ErrUnavailable)
	}
	if c := l.hardState.GetCommit(); index > c {
		// Only applied, hence committed, entries may go; the Ready loop saves
		// the commit index before applying, so this never refuses a legal call.
		return fmt.Errorf("raftlog: compact to %d beyond the saved commit index %d", index, c)
	}
	term, err := l.term(index)
	if err != nil {
		return fmt.Errorf("raftlog: compact to %d: %w", index, err)
	}
	if cs == nil {
		cs = l.compaction.GetConfState()
	}
	meta := &pb.SnapshotMetadata{
		Index:     new(index),
		Term:      new(term),
		ConfState: pb.EnsureConfState(cloneConfState(cs)),
	}
	if _, err := l.write([]pending{protoRecord(recCompaction, meta)}, true); err != nil {
		return fmt.Errorf("raftlog: compact to %d: %w", index, err)
	}
	l.pos = l.pos[index-l.firstIndex()+1:]
	l.compaction = meta
	l.stats.compactions++
	l.cache.dropThrough(index)
	return nil
}

// ApplySnapshot records a snapshot received from the leader: every entry is
// deleted and the compaction point becomes meta's index, term and ConfState,
// so the log is empty with FirstIndex == meta.Index+1. The HardState is left
// alone: the caller saves it next (if it crashes first, InitialState raises
// the commit index to the snapshot index). A snapshot at or below the current
// compaction point returns an error wrapping raft.ErrSnapOutOfDate; the
// initial configuration of a new log is written by Bootstrap, not by an
// index-0 snapshot. Synced.
func (l *Log) ApplySnapshot(meta *pb.SnapshotMetadata) error {
	l.mu.Lock()
	defer l.unlock()
	if l.closed {
		return fmt.Errorf("raftlog: apply snapshot: %w", ErrClosed)
	}
	if meta == nil {
		return errors.New("raftlog: apply snapshot: nil metadata")
	}
	if meta.GetIndex() <= l.compaction.GetIndex() {
		return fmt.Errorf("raftlog: apply snapshot at %d (compaction index %d): %w",
			meta.GetIndex(), l.compaction.GetIndex(), raft.ErrSnapOutOfDate)
	}
	if c := l.hardState.GetCommit(); meta.GetIndex() < c {
		return fmt.Errorf("raftlog: apply snapshot at %d below the saved commit index %d: %w",
			meta.GetIndex(), c, raft.ErrSnapOutOfDate)
	}
	m := &pb.SnapshotMetadata{
		Index:     new(meta.GetIndex()),
		Term:      new(meta.GetTerm()),
		ConfState: pb.EnsureConfState(cloneConfState(meta.GetConfState())),
	}
	if _, err := l.write([]pending{protoRecord(recSnapshot, m)}, true); err != nil {
		return fmt.Errorf("raftlog: apply snapshot at %d: %w", m.GetIndex(), err)
	}
	l.pos = nil
	l.compaction = m
	l.lastIndex = m.GetIndex()
	l.cache.reset()
	l.empty = false
	return nil
}

// Bootstrap records cs, the initial configuration of a brand-new group, as
// the ConfState of compaction point 0. It fails unless IsEmpty. Synced.
func (l *Log) Bootstrap(cs *pb.ConfState) error {
	l.mu.Lock()
	defer l.unlock()
	if l.closed {
		return fmt.Errorf("raftlog: bootstrap: %w", ErrClosed)
	}
	if cs == nil {
		return errors.New("raftlog: bootstrap: nil conf state")
	}
	if !l.empty {
		return errors.New("raftlog: bootstrap: log is not empty")
	}
	m := &pb.SnapshotMetadata{
		Index:     new(uint64(0)),
		Term:      new(uint64(0)),
		ConfState: pb.EnsureConfState(cloneConfState(cs)),
	}
	if _, err := l.write([]pending{protoRecord(recCompaction, m)}, true); err != nil {
		return fmt.Errorf("raftlog: bootstrap: %w", err)
	}
	l.compaction = m
	l.empty = false
	return nil
}

// cloneConfState deep-copies cs; nil gives an empty ConfState.
func cloneConfState(cs *pb.ConfState) *pb.ConfState {
	if cs == nil {
		return new(pb.ConfState)
	}
	return proto.Clone(cs).(*pb.ConfState)
}
