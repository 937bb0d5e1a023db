//go:build !unix

package auth

import (
	"os"
)

// fileID is what tells that the file changed: its modification time and
// size (no inode here).
type fileID struct {
	mtime int64 // Unix nanoseconds
	size  int64
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	return fileID{mtime: fi.ModTime().UnixNano(), size: fi.Size()}, nil
}
