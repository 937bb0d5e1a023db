//go:build linux

// Command fsyncprobe measures the disk a benchmark runs on: how long a small
// write followed by fdatasync takes, how much CPU it costs, and how many such
// flushes the disk completes per second when several threads flush at once.
//
// kvd's write rates follow this figure (every write waits for one fsync of
// the raft log, shared by a group commit), and on the shared VMs where the
// numbers in bench/ are measured it drifts by a factor of two or three
// within an hour.
// bench/core.sh runs it before and after its cases so that each report
// says what the disk was doing while it was measured.
//
// Each thread rewrites its own region of one preallocated, zero-filled file
// (as the raft log writes over its prefilled segments), so fdatasync never
// has file metadata to write.
//
//	go run ./bench/fsyncprobe -dir /path/on/the/disk -threads 1,2,8
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fsyncprobe:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fsyncprobe", flag.ContinueOnError)
	dir := fs.String("dir", os.TempDir(), "directory on the disk to probe (a file is created and removed there)")
	size := fs.Int("size", 3000, "bytes written before each fdatasync (about one group commit of 512-byte sets)")
	count := fs.Int("count", 500, "fdatasync calls per thread")
	threads := fs.String("threads", "1", "comma-separated thread counts, probed one after another")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var ns []int
	for _, s := range strings.Split(*threads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 64 {
			return fmt.Errorf("-threads: %q is not a count from 1 to 64", s)
		}
		ns = append(ns, n)
	}
	if *size < 1 || *size > 1<<20 {
		return fmt.Errorf("-size: %d is not from 1 to 1 MiB", *size)
	}
	if *count < 1 || *count > 1_000_000 {
		return fmt.Errorf("-count: %d is not from 1 to 1,000,000", *count)
	}
	for _, n := range ns {
		r, err := probe(*dir, *size, *count, n)
		if err != nil {
			return err
		}
		fmt.Println(r)
	}
	return nil
}

// result is one probe's outcome.
type result struct {
	threads, size, syncs int
	elapsed              time.Duration
	p50, p90, p99        time.Duration
	cpu                  time.Duration // the process's user+system CPU over the probe
}

func (r result) String() string {
	return fmt.Sprintf("fsync probe: %d thread(s), %d B writes: %.0f fdatasync/s, p50 %s p90 %s p99 %s, %s CPU per fdatasync",
		r.threads, r.size, float64(r.syncs)/r.elapsed.Seconds(),
		us(r.p50), us(r.p90), us(r.p99), us(r.cpu/time.Duration(r.syncs)))
}

func us(d time.Duration) string { return fmt.Sprintf("%dµs", d.Microseconds()) }

// probe runs threads goroutines, each locked to its own thread, that each
// write size bytes and fdatasync count times over one shared file.
func probe(dir string, size, count, threads int) (result, error) {
	f, err := os.CreateTemp(dir, "fsyncprobe-*")
	if err != nil {
		return result{}, fmt.Errorf("create probe file: %w", err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	region := regionSize(size, threads)
	if err := fill(f, region*int64(threads)); err != nil {
		return result{}, fmt.Errorf("prefill %s: %w", filepath.Base(f.Name()), err)
	}
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	lat := make([][]time.Duration, threads)
	errs := make([]error, threads)
	cpu0, err := cpuTime()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for t := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat[t], errs[t] = flushLoop(f, buf, int64(t)*region, region, count)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := cpuTime()
	if err != nil {
		return result{}, err
	}
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	at := func(q float64) time.Duration { return all[int(q*float64(len(all)-1))] }
	return result{
		threads: threads, size: size, syncs: len(all), elapsed: elapsed,
		p50: at(0.50), p90: at(0.90), p99: at(0.99), cpu: cpu1 - cpu0,
	}, nil
}

// regionSize is the bytes of the file each thread writes over: a multiple
// of size, room for 1,000 writes (so a thread does not wrap within a
// default probe) unless that would take the file past 64 MiB, and at
// least one write.
func regionSize(size, threads int) int64 {
	region := int64(min(size*1000, (64<<20)/threads))
	region -= region % int64(size)
	return max(region, int64(size))
}

// flushLoop writes buf at successive offsets of [base, base+region) and
// fdatasyncs after each write, returning each write+fdatasync's duration.
// The goroutine keeps its thread so that threads, not goroutines, flush
// concurrently.
func flushLoop(f *os.File, buf []byte, base, region int64, count int) ([]time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, 0, count)
	fd := int(f.Fd())
	off := int64(0)
	for range count {
		t := time.Now()
		if _, err := f.WriteAt(buf, base+off); err != nil {
			return nil, fmt.Errorf("write: %w", err)
		}
		if err := syscall.Fdatasync(fd); err != nil {
			return nil, fmt.Errorf("fdatasync: %w", err)
		}
		lat = append(lat, time.Since(t))
		off = (off + int64(len(buf))) % region
	}
	return lat, nil
}

// fill writes n zero bytes to f and syncs them, so that later writes land
// on allocated, written blocks.
func fill(f *os.File, n int64) error {
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < n; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), n-off)], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
