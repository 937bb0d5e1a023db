package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// checkTornTail tells damage from a crash where the records of the last
// segment stop at off, further in than checkHeaderRecordsTail looks: the
// record there (d) is incomplete or fails its checksum, chained from prev,
// and hs and comp are the last HardState and compaction index replayed
// before it. nil means a crash
// explains the tail and the log may end at off; otherwise the error names
// the file and d's offset and wraps ErrCorrupt.
//
// What a crash can leave. A crash keeps what was fsynced and, of what was
// written since, any subset of whole sectors, each with the newest bytes
// written to it (a sector holding a byte of a record written later holds
// every byte written to it before). What was written since the last fsync
// is a run of commit-only HardStates (Save writes them without fsync),
// then at most one write whose fsync did not return: entries, perhaps
// with a HardState after them; or one HardState, compaction point,
// snapshot or seal. Every other write is fsynced before the next starts.
//
// The evidence. A record after d checks out only if it is chained from
// d's CRC: the one stored in d, or the one d's stored length, type and
// payload give (when only d's CRC field is spoiled). It is looked for
// where d's stored length, or that length with one bit flipped, says d
// ends. Chained from d's computed CRC, only records of this segment's
// number check out. Chained from the stored one, so do the stale records
// of a recycled spare, chained from each other (d being one of them): the
// records found must then include one a spare cannot hold, an entry,
// compaction point or snapshot above comp (the segments recycled before
// this one started were compacted up to its header's compaction point)
// or a HardState of a term above hs's. A valid record
// there, and the records chained after it, are damage, not a crash, when
//   - d ends elsewhere than its stored length says (the length field was
//     changed, in a sector that survived: a crash does not change bytes);
//   - every sector of d holds bytes that survived (d's CRC, or the record
//     after it): no sector lost can have spoiled it;
//   - or d and what follows cannot all have been written after the last
//     fsync: entries followed by anything but more entries and one
//     HardState, a record of a synced kind followed by anything, a
//     HardState changing the term or vote followed by anything.
//
// Damage that spoils both d's CRC and the rest of it, or its length field
// by more than one bit, leaves nothing to find the next record by, and
// damage in a write no later fsync covers is the tear a crash can make:
// the log then ends at off, as after a crash.
func checkTornTail(f vfs.File, seq uint64, off int64, prev uint32, hs *pb.HardState, comp uint64, size int64) error {
	if size-off < recordHeaderLen {
		return nil
	}
	var hdr [recordHeaderLen]byte
	if _, err := f.ReadAt(hdr[:], off); err != nil {
		return fmt.Errorf("read record at %d: %w", off, err)
	}
	stored := binary.BigEndian.Uint32(hdr[:4])
	n := int64(binary.BigEndian.Uint32(hdr[4:8]))
	typ := hdr[8]
	// The CRC d's stored length, type and payload give: its true CRC if
	// only the CRC field was spoiled.
	computed, haveComputed := uint32(0), false
	if n <= maxRecordPayload && n <= size-off-recordHeaderLen {
		payload := make([]byte, n)
		if _, err := f.ReadAt(payload, off+recordHeaderLen); err != nil {
			return fmt.Errorf("read record at %d: %w", off, err)
		}
		computed, haveComputed = recordCRC(prev, hdr[4:], payload), true
	}
	sec := func(at int64) int64 { return at / sectorSize }
	// A length a crash cannot have changed alone: its bytes lie in one
	// sector, with the CRC's first byte.
	lengthWhole := sec(off) == sec(off+7)
	lengths := []int64{n}
	if lengthWhole {
		for b := range 32 {
			lengths = append(lengths, n^(1<<b))
		}
	}
	for k, m := range lengths {
		end := off + recordHeaderLen + m
		if m > maxRecordPayload || end+recordHeaderLen > size {
			continue
		}
		for _, anchor := range []struct {
			crc uint32
			ok  bool
			// the CRC field is d's own (else its length, type and payload)
			viaStored bool
		}{{stored, true, true}, {computed, haveComputed && k == 0, false}} {
			if !anchor.ok {
				continue
			}
			after, err := readChain(f, end, anchor.crc, size)
			if err != nil {
				return err
			}
			if len(after) == 0 || (anchor.viaStored && !slices.ContainsFunc(after, func(r tailRecord) bool {
				return r.newerThan(comp, hs.GetTerm())
			})) {
				continue
			}
			damaged := func(why string) error {
				return fmt.Errorf("%w: %s: the record at offset %d fails its checksum, yet a valid record of type %d follows it at offset %d (%s): damage, not a crash (the file is left as it is)",
					ErrCorrupt, segmentName(seq), off, after[0].typ, after[0].off, why)
			}
			if k > 0 {
				return damaged("its length field was changed")
			}
			// The sectors shown to have survived: those of d's CRC, or of
			// its length, type and payload, and the one the next record
			// starts in. A sector of d outside them may have been lost.
			var lostable bool
			if anchor.viaStored {
				lostable = sec(off+3)+1 <= sec(end)-1
			} else {
				lostable = sec(off) < sec(off+4)
			}
			if !lostable {
				return damaged("no sector of it can have been lost alone")
			}
			// d's type is its own if the bytes it was read from survived.
			dTyp := byte(0)
			if !anchor.viaStored || sec(off+8) == sec(off) {
				if typ < recHeader || typ > recSeal {
					return damaged("its type field was changed")
				}
				dTyp = typ
			}
			if !unsyncedRun(dTyp, after, hs) {
				return damaged("an fsync covered it")
			}
			return nil
		}
	}
	return nil
}

// tailRecord is what unsyncedRun needs of a record: its type, and the
// index of an entry or the term and vote of a HardState.
type tailRecord struct {
	typ        byte
	off        int64
	index      uint64 // of an entry, compaction point or snapshot
	term, vote uint64
}

// newerThan reports whether r was written after the compaction index was
// comp and the term was term: it cannot be a stale record of a spare.
func (r tailRecord) newerThan(comp, term uint64) bool {
	switch r.typ {
	case recEntry, recCompaction, recSnapshot:
		return r.index > comp
	case recHardState:
		return r.term > term
	}
	return false
}

// readChain reads the records from off on, the first chained from crc,
// up to the first that is missing or fails its checksum, or a seal.
func readChain(f vfs.File, off int64, crc uint32, size int64) ([]tailRecord, error) {
	sr := newSegmentReaderAt(f, off, crc, size, 4<<10)
	var out []tailRecord
	for {
		rec, err := sr.next()
		if errors.Is(err, errEndOfRecords) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		tr := tailRecord{typ: rec.typ, off: rec.off}
		switch rec.typ {
		case recEntry:
			e := new(pb.Entry)
			if proto.Unmarshal(rec.payload, e) == nil {
				tr.index = e.GetIndex()
			}
		case recCompaction, recSnapshot:
			if m, err := decodeMeta(rec.payload); err == nil {
				tr.index = m.GetIndex()
			}
		case recHardState:
			h := new(pb.HardState)
			if proto.Unmarshal(rec.payload, h) == nil {
				tr.term, tr.vote = h.GetTerm(), h.GetVote()
			}
		}
		out = append(out, tr)
		if rec.typ == recSeal {
			return out, nil
		}
	}
}

// unsyncedRun reports whether a record of type dTyp (0: unknown), then
// the records after, can all have been written since the last fsync, the
// HardState before them being hs: commit-only HardStates (its term and
// vote), then at most one write that is fsynced before the next starts.
// Which write the damaged record belonged to is not known; it may be
// either.
func unsyncedRun(dTyp byte, after []tailRecord, hs *pb.HardState) bool {
	recs := after
	if dTyp != 0 {
		recs = append([]tailRecord{{typ: dTyp}}, after...)
	}
	i := 0
	for ; i < len(recs) && recs[i].typ == recHardState; i++ {
		if i == 0 && dTyp == recHardState {
			continue // d itself: a commit-only HardState, or nothing follows it
		}
		if recs[i].term != hs.GetTerm() || recs[i].vote != hs.GetVote() {
			break
		}
	}
	rest := recs[i:]
	if len(rest) <= 1 {
		return true
	}
	if rest[0].typ != recEntry {
		return false
	}
	for j := 1; j < len(rest); j++ {
		switch {
		case rest[j].typ == recEntry:
			known := rest[j-1].index != 0 && rest[j].index != 0
			if known && rest[j].index != rest[j-1].index+1 {
				return false
			}
		case rest[j].typ == recHardState && j == len(rest)-1:
		default:
			return false
		}
	}
	return true
}
