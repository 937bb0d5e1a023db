package node

import "github.com/kvd-project/kvd/internal/fsm"

// The state store's open files (Pebble's file cache) are bounded by what
// the descriptor limit leaves: a store of large values keeps about one
// blob file per flush (some 24 MB each under 8 KiB sets), so past
// Pebble's default of 1,000 files, around 24 GB of such values, random
// gets reopened a file for every fifth get (bench/RESULTS-core.md).
const (
	// fileReserve is kept for everything but the memcache connections and
	// the store's tables: HTTP clients, peers, the raft log's segments.
	fileReserve = 1024
	// minStoreFiles is Pebble's own default, which kvd never goes below.
	minStoreFiles = fsm.DefaultMaxOpenFiles
	// maxStoreFiles bounds the file cache's memory (a reader per file)
	// however high the limit; CockroachDB recommends as many per store.
	maxStoreFiles = 10000
)

// storeFileBudget returns how many files the state store may keep open
// given the descriptor limit and --max-connections, and whether the limit
// is too low to hold both at minStoreFiles (then the store still gets
// minStoreFiles, as before this bound existed, and the caller warns). A
// limit of 0 (unknown) gives minStoreFiles.
func storeFileBudget(limit uint64, maxConns int) (files int, short bool) {
	if limit == 0 {
		return minStoreFiles, false
	}
	need := uint64(maxConns) + fileReserve
	if limit < need+minStoreFiles {
		return minStoreFiles, true
	}
	return int(min(limit-need, maxStoreFiles)), false
}
