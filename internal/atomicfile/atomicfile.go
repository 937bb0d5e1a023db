// Package atomicfile owns writing a small file so that a crash or a
// concurrent reader sees the old contents or the new, never a part: the
// certificates, keys and htpasswd files that `kvd certs` makes, which a
// running kvd re-reads when they change. It is called from the CLI's
// goroutine and keeps no state.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrExists is returned by Write when the file exists and overwrite is off.
var ErrExists = fs.ErrExist

// Write puts data at path with mode perm: it writes a temporary file in the
// same directory, fsyncs it, then renames it over path (overwrite) or links
// it to path, which fails if path exists (no overwrite, so two processes
// racing to create the file cannot both win), and fsyncs the directory so
// the new name survives a crash.
//
// perm is set with chmod, not through the umask: a key file must be 0600
// whatever the umask of the shell that made it.
func Write(path string, data []byte, perm os.FileMode, overwrite bool) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer func() {
		if tmp != nil {
			_ = tmp.Close()
		}
		// After a rename there is nothing left at tmpName; after a link or
		// a failure there is, and it must not linger.
		if rmErr := os.Remove(tmpName); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("write %s: remove temporary file: %w", path, rmErr)
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: chmod: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: fsync: %w", path, err)
	}
	closeErr := tmp.Close()
	tmp = nil
	if closeErr != nil {
		return fmt.Errorf("write %s: close: %w", path, closeErr)
	}
	if overwrite {
		if err := os.Rename(tmpName, path); err != nil {
			return fmt.Errorf("write %s: rename: %w", path, err)
		}
	} else if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("write %s: %w", path, ErrExists)
		}
		return fmt.Errorf("write %s: link: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that a name just added to it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	syncErr := d.Sync()
	closeErr := d.Close()
	if syncErr != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, syncErr)
	}
	if closeErr != nil {
		return fmt.Errorf("close directory %s: %w", dir, closeErr)
	}
	return nil
}
