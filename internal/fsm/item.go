package fsm

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvd-project/kvd/internal/command"
)

// Item versions. Version 1 kept the expiry in whole seconds, which made a
// relative exptime count from the current second, so an item could go up
// to a second early (as in memcached); version 2 keeps it in nanoseconds.
// Version 3 adds the meta protocol's item state (command.Item's Fetched,
// AccessedAt, Stale, TokenSent and KeyBinary) after version 2's header.
//
// All three are read; version 3 is written only for an item whose meta
// state is not all zero, and version 2 for every other. Only the meta
// writes (command.OpMetaGet … OpAccess, cluster version 5) set that state,
// and they are proposed only once every member applies them, so a store
// that never saw one holds only what older binaries read. That matters
// beyond this node: a snapshot is a copy of the store, and during a
// rolling upgrade it may be sent to a member still running an older kvd,
// which must be able to read every item in it.
const (
	itemVersionSec  = 1
	itemVersion     = 2
	itemVersionMeta = 3
	itemHeaderLen   = 1 + 4 + 8 + 8 + 8
	// itemMetaHeaderLen is version 3's header: version 2's, a byte of
	// meta bits and AccessedAt.
	itemMetaHeaderLen = itemHeaderLen + 1 + 8
)

// Version 3's meta bits; any other bit set is a corrupt item.
const (
	itemFetched   = 1 << 0
	itemStale     = 1 << 1
	itemTokenSent = 1 << 2
	itemKeyBinary = 1 << 3
	itemMetaKnown = itemFetched | itemStale | itemTokenSent | itemKeyBinary
)

// hasMeta reports whether it has meta state, which only version 3 holds.
func hasMeta(it *command.Item) bool {
	return it.Fetched || it.AccessedAt != 0 || it.Stale || it.TokenSent || it.KeyBinary
}

func encodeItem(dst []byte, it *command.Item) []byte {
	meta := hasMeta(it)
	if meta {
		dst = append(dst, itemVersionMeta)
	} else {
		dst = append(dst, itemVersion)
	}
	dst = binary.BigEndian.AppendUint32(dst, it.Flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(it.ExpiresAt))
	dst = binary.BigEndian.AppendUint64(dst, it.CAS)
	dst = binary.BigEndian.AppendUint64(dst, uint64(it.StoredAt))
	if meta {
		var bits byte
		if it.Fetched {
			bits |= itemFetched
		}
		if it.Stale {
			bits |= itemStale
		}
		if it.TokenSent {
			bits |= itemTokenSent
		}
		if it.KeyBinary {
			bits |= itemKeyBinary
		}
		dst = append(dst, bits)
		dst = binary.BigEndian.AppendUint64(dst, uint64(it.AccessedAt))
	}
	return append(dst, it.Value...)
}

// decodeItem parses b into *it, every field of it (callers reuse one Item
// for many); Value aliases b.
func decodeItem(b []byte, it *command.Item) error {
	hdr := itemHeaderLen
	if len(b) > 0 && b[0] == itemVersionMeta {
		hdr = itemMetaHeaderLen
	}
	if len(b) < hdr || (b[0] != itemVersion && b[0] != itemVersionSec && b[0] != itemVersionMeta) {
		return fmt.Errorf("decode item: bad header (%d bytes, version %d)", len(b), firstByte(b))
	}
	*it = command.Item{
		Flags:     binary.BigEndian.Uint32(b[1:]),
		ExpiresAt: int64(binary.BigEndian.Uint64(b[5:])),
		CAS:       binary.BigEndian.Uint64(b[13:]),
		StoredAt:  int64(binary.BigEndian.Uint64(b[21:])),
		Value:     b[hdr:],
	}
	switch b[0] {
	case itemVersionSec:
		it.ExpiresAt = secToNs(it.ExpiresAt)
	case itemVersionMeta:
		bits := b[itemHeaderLen]
		if bits&^itemMetaKnown != 0 {
			return fmt.Errorf("decode item: meta bits %#x", bits)
		}
		it.Fetched = bits&itemFetched != 0
		it.Stale = bits&itemStale != 0
		it.TokenSent = bits&itemTokenSent != 0
		it.KeyBinary = bits&itemKeyBinary != 0
		it.AccessedAt = int64(binary.BigEndian.Uint64(b[itemHeaderLen+1:]))
	}
	return nil
}

// secToNs converts a version 1 expiry. Version 1 took any 64-bit ttl from
// the HTTP API unclamped, so a "never" such as 9999999999 s is past the
// last Unix nanosecond: it becomes that nanosecond, as command.ExpiryOf clamps new
// writes, rather than wrapping into the past and losing the item. (Its
// index entry stays under the old second, which no sweep reaches before
// the year 2286.)
func secToNs(sec int64) int64 {
	switch {
	case sec > math.MaxInt64/int64(1e9):
		return math.MaxInt64
	case sec < 0:
		return 1 // already expired, as command.ExpiryOf stores a negative exptime
	default:
		return sec * 1e9
	}
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// Key layout of the state store. One byte of prefix per keyspace keeps data,
// the expiry index and metadata apart and lets flush_all drop each with one
// range deletion.
const (
	prefixData   = 'd'
	prefixExpiry = 'x'
	prefixMeta   = 'm'
)

var (
	metaApplied = []byte{prefixMeta, 'a'} // uint64: last applied raft index
	metaItems   = []byte{prefixMeta, 'i'} // uint64: live + not-yet-swept items
	metaBytes   = []byte{prefixMeta, 'b'} // uint64: sum of value sizes
	metaFlushAt = []byte{prefixMeta, 'f'} // int64 Unix ns: pending delayed flush_all horizon
	// int64 Unix ns: items stored before it are gone for good, the passed
	// horizon of a delayed flush_all that a later one replaced (cluster
	// version 3 on; absent: 0, none).
	metaFlushedBefore = []byte{prefixMeta, 'g'}
	// uint64: the cluster version (command.ClusterVersionMax); absent in a
	// store that never recorded one, which is version 1.
	metaClusterVersion = []byte{prefixMeta, 'v'}
	// metaMember + BE(member ID) → JSON Member: the replicated member table.
	metaMember = []byte{prefixMeta, 'M'}
)

func dataKey(dst, key []byte) []byte {
	dst = append(dst, prefixData)
	return append(dst, key...)
}

// expiryKey indexes an item by its expiry, under the first
// whole second at which it is gone, the unit of the sweep (ExpiredBefore);
// version 1 items, whose expiry was whole seconds, keep their index keys.
func expiryKey(dst []byte, it *command.Item, key []byte) []byte {
	dst = append(dst, prefixExpiry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(it.ExpirySec()))
	return append(dst, key...)
}
