package fsm

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ScanItem is one item found by Scan: its key and metadata. The value is not
// copied (a listing of a thousand 1 MiB items must not hold a gigabyte);
// Get reads one value.
type ScanItem struct {
	Key   []byte
	Flags uint32
	// Expiry is the first Unix second at which the item is gone; 0 means
	// never.
	Expiry int64
	// CAS is the item's CAS token (the raft index that last changed it).
	CAS uint64
	// Size is the value's length in bytes.
	Size int
}

// MaxScanLimit bounds one Scan call.
const MaxScanLimit = 10000

// Scan lists, in key order, up to limit items whose key starts with prefix
// and sorts strictly after after (nil or empty: from the first key of the
// prefix), as visible at nowNs (Unix ns, the reader's clock): expired items
// and items hidden by a delayed flush_all are skipped, exactly as Get would
// not return them. Safe from any goroutine; it reads a consistent Pebble
// snapshot, which may be older than a concurrent Apply.
//
// Skipped items still cost a step each: a range of many expired items the
// leader has not swept yet makes one call slower, never wrong.
func (f *FSM) Scan(prefix, after []byte, limit int, nowNs int64) ([]ScanItem, error) {
	if limit <= 0 {
		return nil, nil
	}
	limit = min(limit, MaxScanLimit)
	lower := dataKey(nil, prefix)
	upper := prefixEnd(lower)
	if len(after) > 0 {
		// The smallest data key strictly greater than after is after+0x00.
		if start := append(dataKey(nil, after), 0); bytes.Compare(start, lower) > 0 {
			lower = start
		}
	}
	if bytes.Compare(lower, upper) >= 0 {
		return nil, nil
	}
	flushAt := f.flushAt.Load() // before the data, as in Get
	f.dbMu.RLock()
	defer f.dbMu.RUnlock()
	if f.db == nil {
		return nil, errNoStore
	}
	iter, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("scan %q: %w", prefix, err)
	}
	defer iter.Close()
	var out []ScanItem
	var it Item
	for ok := iter.First(); ok && len(out) < limit; ok = iter.Next() {
		k := iter.Key()
		v, err := iter.ValueAndErr() // Value() hides a failed read as nil
		if err != nil {
			return nil, fmt.Errorf("scan: read key %q: %w", k[1:], err)
		}
		if err := decodeItem(v, &it); err != nil {
			return nil, fmt.Errorf("scan: key %q: %w", k[1:], err)
		}
		if !visible(&it, flushAt, nowNs) {
			continue
		}
		out = append(out, ScanItem{
			Key:    append([]byte(nil), k[1:]...),
			Flags:  it.Flags,
			Expiry: it.ExpirySec(),
			CAS:    it.CAS,
			Size:   len(it.Value),
		})
	}
	if err := iter.Error(); err != nil {
		return nil, fmt.Errorf("scan %q: %w", prefix, err)
	}
	return out, nil
}

// prefixEnd returns the smallest key greater than every key starting with p
// (p must contain a byte below 0xff, which every data key's prefix byte is).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for len(end) > 0 {
		last := len(end) - 1
		if end[last] < 0xff {
			end[last]++
			return end
		}
		end = end[:last]
	}
	return nil
}
