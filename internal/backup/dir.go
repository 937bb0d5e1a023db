package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A save into a directory (`kvd snapshot save --dir DIR --keep N`, for a
// scheduled job in an image without a shell to run date(1)) names its file
// by the time it starts, in UTC to the millisecond, so that names sort as
// the saves were made: kvd-20240102T030405.678Z.kvdsnap.
const (
	dirPrefix = "kvd-"
	dirSuffix = ".kvdsnap"
	dirLayout = "20060102T150405.000Z"
)

// DirName is the name of the file a save into a directory started at t
// writes.
func DirName(t time.Time) string { return dirPrefix + t.UTC().Format(dirLayout) + dirSuffix }

// isDirSnapshot reports whether name is one DirName gives, and so one
// Prune may remove: any other file in the directory is the operator's.
func isDirSnapshot(name string) bool {
	stamp, ok := strings.CutPrefix(name, dirPrefix)
	if !ok {
		return false
	}
	stamp, ok = strings.CutSuffix(stamp, dirSuffix)
	if !ok {
		return false
	}
	_, err := time.Parse(dirLayout, stamp)
	return err == nil
}

// Prune removes from dir the snapshots a save into it wrote (DirName)
// beyond the newest keep, and the .part files of earlier saves that did not
// finish (killed: Save removes its own on an error), older than the newest
// snapshot. It returns the paths removed. keep < 1 keeps every snapshot:
// pruning is for a directory a save just wrote into, never to empty one.
func Prune(dir string, keep int) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("prune snapshots: %w", err)
	}
	var snaps, parts []string
	for _, e := range ents {
		switch name := e.Name(); {
		case e.IsDir():
		case isDirSnapshot(name):
			snaps = append(snaps, name)
		case strings.HasSuffix(name, ".part") && isDirSnapshot(strings.TrimSuffix(name, ".part")):
			parts = append(parts, name)
		}
	}
	slices.Sort(snaps) // oldest first: the names sort by time
	var drop []string
	if keep >= 1 && len(snaps) > keep {
		drop = append(drop, snaps[:len(snaps)-keep]...)
	}
	if len(snaps) > 0 {
		newest := snaps[len(snaps)-1]
		for _, p := range parts {
			// Only a .part older than the newest snapshot: a newer one may
			// be a save still running.
			if strings.TrimSuffix(p, ".part") < newest {
				drop = append(drop, p)
			}
		}
	}
	var removed []string
	var errs []error
	for _, name := range drop {
		path := filepath.Join(dir, name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("prune snapshots: %w", err))
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}
