package fsm

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvd-project/kvd/internal/command"
)

// MaxScanLimit bounds one Scan call.
const MaxScanLimit = 10000

// scanBudget bounds the work of one ScanPage call: items examined, visible
// or not, and the key and value bytes read (a value of a kilobyte or more
// lives in a blob file and is read whole to decode the item's header). Each
// call holds dbMu, which InstallSnapshot waits for (and, while it waits,
// every other reader), and an iterator pinning memtables and sstables, so a
// range of hidden items (millions after a delayed flush_all, until the
// leader's crawl deletes them) must not be stepped over in one call. A var
// so that tests can shrink it.
var scanBudget = struct {
	steps int
	bytes int64
}{steps: 4096, bytes: 64 << 20}

// Scan lists, in key order, up to limit items whose key starts with prefix
// and sorts strictly after after (nil or empty: from the first key of the
// prefix), as visible at nowNs (Unix ns, the reader's clock): expired items
// and items hidden by a delayed flush_all are skipped, exactly as Get would
// not return them. Safe from any goroutine.
//
// It reads the store one ScanPage at a time, each a consistent Pebble
// snapshot (possibly older than a concurrent Apply), so a long run of hidden
// items costs time but never holds the store for long; the pages of one
// call are each consistent, not the whole. A caller that answers a client
// should prefer ScanPage, whose work per call is bounded.
func (f *FSM) Scan(prefix, after []byte, limit int, nowNs int64) ([]command.ScanItem, error) {
	limit = min(limit, MaxScanLimit)
	var out []command.ScanItem
	for len(out) < limit {
		items, next, err := f.ScanPage(prefix, after, limit-len(out), nowNs)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if next == nil {
			break
		}
		after = next
	}
	return out, nil
}

// ScanPage is one bounded step of Scan: it examines at most a budget of
// items (visible or not) and returns the visible ones, up to limit, with
// next, the last key it examined when it stopped before the end of the
// range (resume with after = next), nil when it read the range to its end.
// A page may thus hold fewer than limit items, even none, and still have a
// next; next always sorts strictly after after, so following it ends.
func (f *FSM) ScanPage(prefix, after []byte, limit int, nowNs int64) (items []command.ScanItem, next []byte, err error) {
	if limit <= 0 {
		return nil, nil, nil
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
		return nil, nil, nil
	}
	f.dbMu.RLock()
	defer f.dbMu.RUnlock()
	h := f.horizons() // under the lock and before the data, as in Get
	if f.db == nil {
		return nil, nil, errNoStore
	}
	iter, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, nil, fmt.Errorf("scan %q: %w", prefix, err)
	}
	defer iter.Close()
	var it command.Item
	steps, read := 0, int64(0)
	ok := iter.First()
	for ; ok && len(items) < limit && steps < scanBudget.steps && read < scanBudget.bytes; ok = iter.Next() {
		steps++
		k := iter.Key()
		v, err := iter.ValueAndErr() // Value() hides a failed read as nil
		if err != nil {
			return nil, nil, fmt.Errorf("scan: read key %q: %w", k[1:], err)
		}
		read += int64(len(k) + len(v))
		next = append(next[:0], k[1:]...)
		if err := decodeItem(v, &it); err != nil {
			return nil, nil, fmt.Errorf("scan: key %q: %w", k[1:], err)
		}
		if !visible(&it, h, nowNs) {
			continue
		}
		items = append(items, command.ScanItem{
			Key:    bytes.Clone(k[1:]),
			Flags:  it.Flags,
			Expiry: it.ExpirySec(),
			CAS:    it.CAS,
			Size:   len(it.Value),
		})
	}
	if err := iter.Error(); err != nil {
		return nil, nil, fmt.Errorf("scan %q: %w", prefix, err)
	}
	if !ok {
		next = nil // read to the end
	}
	return items, next, nil
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
