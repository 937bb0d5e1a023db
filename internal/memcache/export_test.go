package memcache

// GatChunk is gatChunk, for the black-box tests.
const GatChunk = gatChunk
