package fsm

import (
	"encoding/binary"
	"fmt"
)

// Item is one stored value as clients see it.
type Item struct {
	Flags uint32
	// Expiry is an absolute Unix time in seconds; 0 means never. The item is
	// gone from the first second >= Expiry.
	Expiry int64
	// CAS is the raft index of the entry that last changed the value, so every
	// node hands out the same token and tokens survive failover and restart.
	CAS uint64
	// StoredAt is the stamp (Unix ns) of the entry that last changed the value;
	// a delayed flush_all hides items stored before its horizon.
	StoredAt int64
	Value    []byte
}

const (
	itemVersion   = 1
	itemHeaderLen = 1 + 4 + 8 + 8 + 8
)

func encodeItem(dst []byte, it *Item) []byte {
	dst = append(dst, itemVersion)
	dst = binary.BigEndian.AppendUint32(dst, it.Flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(it.Expiry))
	dst = binary.BigEndian.AppendUint64(dst, it.CAS)
	dst = binary.BigEndian.AppendUint64(dst, uint64(it.StoredAt))
	return append(dst, it.Value...)
}

// decodeItem parses b; Value aliases b.
func decodeItem(b []byte, it *Item) error {
	if len(b) < itemHeaderLen || b[0] != itemVersion {
		return fmt.Errorf("decode item: bad header (%d bytes, version %d)", len(b), firstByte(b))
	}
	it.Flags = binary.BigEndian.Uint32(b[1:])
	it.Expiry = int64(binary.BigEndian.Uint64(b[5:]))
	it.CAS = binary.BigEndian.Uint64(b[13:])
	it.StoredAt = int64(binary.BigEndian.Uint64(b[21:]))
	it.Value = b[itemHeaderLen:]
	return nil
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
	// metaMember + BE(member ID) → JSON Member: the replicated member table.
	metaMember = []byte{prefixMeta, 'M'}
)

func dataKey(dst, key []byte) []byte {
	dst = append(dst, prefixData)
	return append(dst, key...)
}

func expiryKey(dst []byte, expiry int64, key []byte) []byte {
	dst = append(dst, prefixExpiry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(expiry))
	return append(dst, key...)
}

// expiryOf turns memcached's exptime into an absolute expiry (Unix seconds)
// as of nowSec, exactly as memcached does: 0 never expires, up to 30 days is
// relative, larger is an absolute Unix time, negative is already expired.
func expiryOf(exptime, nowSec int64) int64 {
	const maxRelative = 60 * 60 * 24 * 30
	switch {
	case exptime == 0:
		return 0
	case exptime < 0:
		return 1
	case exptime <= maxRelative:
		return nowSec + exptime
	default:
		return exptime
	}
}
