package durable

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// dirMode is what kvd creates its directories with: the data dir holds
// every value clients stored, which other users of the host have no
// business reading (etcd's data dir is 0700; kvd's files are group-
// readable, as cluster.json is 0640, for an operator's group).
const dirMode = 0o750

// MkdirAll creates dir and any missing parents, then fsyncs the parent of
// dir and of each of its ancestors, up to the root (or, for a relative
// path, the working directory), so that the whole path survives a crash.
// Pebble syncs dir itself, not its parents.
//
// It syncs them even when every directory already exists: an earlier start
// may have created them and been killed before its syncs, and the operator's
// mkdir -p never syncs. Knowing which directories are new is therefore not
// enough, and a directory fsync with nothing to write is cheap: a few per
// start.
func MkdirAll(fsys vfs.FS, dir string) error {
	if err := fsys.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for d := dir; ; {
		parent := fsys.PathDir(d)
		if parent == d {
			return nil
		}
		// A parent kvd may not read (a 0711 home, say) is in practice one
		// it may not write either, so not one it created a directory in:
		// nothing of kvd's to make durable there, no reason to refuse to
		// start.
		if err := syncDir(fsys, parent); err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
		d = parent
	}
}

// syncDir fsyncs the directory dir, making the entries in it durable.
func syncDir(fsys vfs.FS, dir string) error {
	f, err := fsys.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open directory %s to sync it: %w", dir, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
