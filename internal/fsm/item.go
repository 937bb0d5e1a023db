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
// Both are read; only version 2 is written.
const (
	itemVersionSec = 1
	itemVersion    = 2
	itemHeaderLen  = 1 + 4 + 8 + 8 + 8
)

func encodeItem(dst []byte, it *command.Item) []byte {
	dst = append(dst, itemVersion)
	dst = binary.BigEndian.AppendUint32(dst, it.Flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(it.ExpiresAt))
	dst = binary.BigEndian.AppendUint64(dst, it.CAS)
	dst = binary.BigEndian.AppendUint64(dst, uint64(it.StoredAt))
	return append(dst, it.Value...)
}

// decodeItem parses b; Value aliases b.
func decodeItem(b []byte, it *command.Item) error {
	if len(b) < itemHeaderLen || (b[0] != itemVersion && b[0] != itemVersionSec) {
		return fmt.Errorf("decode item: bad header (%d bytes, version %d)", len(b), firstByte(b))
	}
	it.Flags = binary.BigEndian.Uint32(b[1:])
	it.ExpiresAt = int64(binary.BigEndian.Uint64(b[5:]))
	if b[0] == itemVersionSec {
		it.ExpiresAt = secToNs(it.ExpiresAt)
	}
	it.CAS = binary.BigEndian.Uint64(b[13:])
	it.StoredAt = int64(binary.BigEndian.Uint64(b[21:]))
	it.Value = b[itemHeaderLen:]
	return nil
}

// secToNs converts a version 1 expiry. Version 1 took any 64-bit ttl from
// the HTTP API unclamped, so a "never" such as 9999999999 s is past the
// last Unix nanosecond: it becomes that nanosecond, as expiryOf clamps new
// writes, rather than wrapping into the past and losing the item. (Its
// index entry stays under the old second, which no sweep reaches before
// the year 2286.)
func secToNs(sec int64) int64 {
	switch {
	case sec > math.MaxInt64/int64(1e9):
		return math.MaxInt64
	case sec < 0:
		return 1 // already expired, as expiryOf stores a negative exptime
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

// expiryOf turns memcached's exptime into the instant an item written at
// stampNs goes (Unix ns): 0 never expires, up to 30 days is relative,
// larger is an absolute Unix time, negative is already expired. A relative
// exptime counts from the write's own stamp, to the nanosecond: the item is
// retrievable for exactly that long and not after, where memcached, which
// counts from its current whole second, may drop it up to a second early.
// With a durable write's latency added to that second, a client touching a
// 2-second item every second would lose it now and then.
func expiryOf(exptime, stampNs int64) int64 {
	const maxRelative = 60 * 60 * 24 * 30
	switch {
	case exptime == 0:
		return 0
	case exptime < 0:
		return 1
	case exptime <= maxRelative:
		return stampNs + exptime*1e9
	case exptime > math.MaxInt64/int64(1e9):
		// Past the year 2262, where Unix ns end (the HTTP API takes any
		// 64-bit ttl): as good as never, but still an expiry.
		return math.MaxInt64
	default:
		return exptime * 1e9
	}
}
