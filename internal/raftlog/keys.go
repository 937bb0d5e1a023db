package raftlog

import (
	"encoding/binary"
	"fmt"
)

// formatVersion is the on-disk layout written and understood by this package.
const formatVersion byte = 1

// Key layout: see the package comment. The prefixes are part of the on-disk
// format; never renumber them.
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
