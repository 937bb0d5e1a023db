package fsm

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// pacedFS paces Pebble's retries of failing background work. Pebble
// retries a failed flush at once and without end, and a failed compaction
// whenever it next picks one: on a full disk that was hundreds of attempts
// a second, each creating, writing and removing a file, a core's worth of
// CPU taken from a node that still serves reads, deletes and flush_all.
// Flushes and compactions are what create sstables and blob files (a
// checkpoint too, when it cannot hard-link them, but kvd's Checkpoint
// refuses to start while the store's work is failing), and they create
// them without Pebble's DB mutex held, so a pause there delays the next
// attempt and nothing else: commits, reads and the Ready loop go on. While
// nothing fails, Create costs one uncontended mutex more.
type pacedFS struct {
	vfs.FS
	health *storeHealth
	// pause is Options.RetryPause.
	pause func(failures uint64)
}

func (fs pacedFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if isBackgroundOutput(name) {
		if n, ok := fs.health.pauseDue(); ok {
			fs.pause(n)
		}
	}
	return fs.FS.Create(name, category)
}

// Unwrap gives Pebble the filesystem underneath (vfs.Root).
func (fs pacedFS) Unwrap() vfs.FS { return fs.FS }

// isBackgroundOutput reports whether name is an sstable or a blob file.
func isBackgroundOutput(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}
