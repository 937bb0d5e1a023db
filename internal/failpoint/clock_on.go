//go:build failpoints && unix

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// offset is added to the wall clock Now reports, in ns.
var offset atomic.Int64

// clockPoll is how often the offset file is read.
const clockPoll = 50 * time.Millisecond

func init() {
	path := os.Getenv(ClockEnvVar)
	if path == "" {
		return
	}
	if err := readOffset(path); err != nil {
		fmt.Fprintf(os.Stderr, "kvd: failpoints: %s: %v\n", ClockEnvVar, err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "failpoint clock: offset %s, from %s\n", time.Duration(offset.Load()), path)
	go func() {
		for range time.Tick(clockPoll) {
			before := offset.Load()
			// A file being rewritten may read empty or torn: the offset
			// stays until it reads whole again.
			if readOffset(path) == nil && offset.Load() != before {
				fmt.Fprintf(os.Stderr, "failpoint clock: offset %s\n", time.Duration(offset.Load()))
			}
		}
	}()
}

// readOffset sets the offset from the file at path ("" or missing: 0).
func readOffset(path string) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		offset.Store(0)
		return nil
	}
	if err != nil {
		return err
	}
	d, err := ParseOffset(string(b))
	if err != nil {
		return err
	}
	offset.Store(int64(d))
	return nil
}

// Now is the wall clock, shifted by the offset the clock file holds.
func Now() time.Time { return time.Now().Add(time.Duration(offset.Load())) }

// ParseOffset reads a clock file's content: a Go duration, or nothing.
func ParseOffset(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("clock offset %q: %w", s, err)
	}
	return d, nil
}
