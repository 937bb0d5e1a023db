//go:build unix

package auth

import (
	"os"
	"syscall"
)

// fileID is what tells that the file changed: its modification time, size
// and inode (a file replaced by a rename keeps neither).
type fileID struct {
	mtime int64 // Unix nanoseconds
	size  int64
	inode uint64
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{mtime: fi.ModTime().UnixNano(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.inode = uint64(st.Ino) //nolint:unconvert // not uint64 on every unix
	}
	return id, nil
}
