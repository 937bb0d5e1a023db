// Package durable owns making directory creation crash-safe on a Pebble
// vfs.FS: a directory that a power loss can take back would take a store's
// contents with it, so both stores (raftlog and fsm) create their
// directories through here.
package durable

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// MkdirAll creates dir and any missing parents, then fsyncs the parent
// of every directory it created, so that the directory entries survive a
// crash (Pebble syncs dir itself, not its parents).
func MkdirAll(fsys vfs.FS, dir string) error {
	var created []string
	for d := dir; ; {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		created = append(created, d)
		parent := fsys.PathDir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if len(created) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range created {
		parent := fsys.PathDir(d)
		if parent == d {
			continue
		}
		f, err := fsys.OpenDir(parent)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync %s: %w", parent, err)
		}
	}
	return nil
}
