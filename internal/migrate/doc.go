// Package migrate moves items into and out of kvd by way of its clients'
// own doors: `kvd import` copies a live memcached's items (or an export
// file's) into kvd through the memcache protocol, the normal write path,
// so every copied item is a replicated, fsynced write like any other; `kvd
// export` writes a running kvd's items, taken from a consistent snapshot
// (internal/backup), to a portable JSON Lines file (docs/backup.md,
// "Export format").
//
// An import is a Source (the items' origin: a memcached, a file) listing
// its keys in batches, a few workers each fetching a batch from the source
// and writing it to kvd with pipelined meta commands, and a verify pass
// that reads every copied key back from kvd. The CLI (internal/cli) calls
// Import and Export from its command's goroutine; both run their own
// goroutines and return once those have stopped.
//
// Both ends are reached through a Dialer, so TLS or authentication can be
// added by wrapping the connection without touching the protocol code.
package migrate
