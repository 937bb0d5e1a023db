// Package durable owns what kvd's two Pebble-based stores share, so that it
// is written once:
//
//   - crash-safe directory creation on a Pebble vfs.FS (MkdirAll): a
//     directory that a power loss can take back would take a store's
//     contents with it, so raftlog and fsm create their directories
//     through here, once per start, from the goroutine that opens the
//     store, before they write anything;
//   - PebbleLogger, the one adapter from slog to Pebble's Logger, which
//     fsm (the state store, and its v1 format upgrade) and raftlog (the
//     conversion of a log kept in Pebble before format version 2) open
//     Pebble with, and which Pebble calls from its own goroutines too.
//
// It is, with raftlog and fsm, the only package that imports Pebble
// (internal/testing/lint checks).
package durable
