package raftlog

import (
	"encoding/binary"
	"fmt"
)

// formatVersion is the on-disk layout written and read by this package:
// segment files (segment.go). Version 1 kept the log in Pebble, under the
// keys below; Open converts such a log (convert.go).
const formatVersion byte = 2

// pebbleFormatVersion is the version a Pebble-kept log recorded under
// keyFormat.
const pebbleFormatVersion byte = 1

// Key layout of a Pebble-kept log (format version 1):
//
//	"v"                    format version (one byte, 1)
//	"h"                    HardState, proto-encoded
//	"c"                    compaction point: SnapshotMetadata{Index, Term, ConfState}, proto-encoded
//	"e" + uint64 BE index  Entry, proto-encoded (big-endian so keys sort in index order)
const (
	prefixEntry byte = 'e'
	// prefixEntryEnd is the first byte after every entry key.
	prefixEntryEnd byte = prefixEntry + 1
)

var (
	keyFormat     = []byte{'v'}
	keyHardState  = []byte{'h'}
	keyCompaction = []byte{'c'}

	entryKeysStart = []byte{prefixEntry}
	entryKeysEnd   = []byte{prefixEntryEnd}
)

const entryKeyLen = 1 + 8

// entryKey returns the key of the entry at index.
func entryKey(index uint64) []byte {
	k := make([]byte, entryKeyLen)
	k[0] = prefixEntry
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

// parseEntryKey returns the index encoded in an entry key.
func parseEntryKey(k []byte) (uint64, error) {
	if len(k) != entryKeyLen || k[0] != prefixEntry {
		return 0, fmt.Errorf("%w: malformed entry key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}
