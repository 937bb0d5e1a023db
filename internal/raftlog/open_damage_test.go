package raftlog

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

const memDir = "/raft"

// readFile returns the contents of name on fs.
func readFile(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	b := make([]byte, st.Size())
	if len(b) > 0 {
		_, err = f.ReadAt(b, 0)
		require.NoError(t, err)
	}
	return b
}

// writeFile creates name on fs holding b.
func writeFile(t *testing.T, fs vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

// flipBit flips the low bit of the byte at off in name on fs.
func flipBit(t *testing.T, fs vfs.FS, name string, off int64) {
	t.Helper()
	f, err := fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 1
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// segmentFiles returns the names of the segment and spare files in dir.
func segmentFiles(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	require.NoError(t, err)
	names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasSuffix(n, segmentSuffix) })
	slices.Sort(names)
	return names
}

// A damaged header on the last segment followed by valid records is damage,
// not a crash in rotate (the header is fsynced before anything is written
// after it): Open refuses the log and leaves the segment where it is,
// instead of dropping every acknowledged record in it.
func TestOpenRefusesDamagedHeaderOfLastSegment(t *testing.T) {
	logs := []struct {
		name string
		// write fills a log and returns it open, with its last segment
		// holding records after the header.
		write func(t *testing.T, fs vfs.FS) *Log
	}{
		{name: "one segment, never reopened", write: func(t *testing.T, fs vfs.FS) *Log {
			l, err := Open(memDir, nil, Options{FS: fs})
			require.NoError(t, err)
			require.NoError(t, l.Bootstrap(confState(1, 2, 3)))
			require.NoError(t, l.Save(hardState(7, 2, 10), entries(1, 20, 7)))
			return l
		}},
		{name: "entries after a reopen", write: func(t *testing.T, fs vfs.FS) *Log {
			l, err := Open(memDir, nil, Options{FS: fs})
			require.NoError(t, err)
			require.NoError(t, l.Save(hardState(7, 2, 10), entries(1, 20, 7)))
			require.NoError(t, l.Close())
			l, err = Open(memDir, nil, Options{FS: fs})
			require.NoError(t, err)
			require.NoError(t, l.Save(hardState(8, 3, 20), entries(21, 30, 8)))
			return l
		}},
		{name: "only header records, the segments before it recycled", write: func(t *testing.T, fs vfs.FS) *Log {
			opts := Options{FS: fs, SegmentBytes: 1024}
			l := compactedManySegments(t, opts)
			require.NoError(t, l.Close())
			// Open rotates past the entries and recycles every segment
			// before: the compaction point and the HardState are now only
			// in the last segment's header records.
			l, err := Open(memDir, nil, opts)
			require.NoError(t, err)
			require.Len(t, l.segs, 1)
			return l
		}},
	}
	header, _ := appendRecord(nil, 0, recHeader, headerPayload(0))
	damages := []struct {
		name string
		off  int64
	}{
		{"CRC", 0},
		{"length", 7},
		{"type", 8},
		{"format version", 9},
		{"segment number", int64(len(header)) - 1},
	}
	for _, lc := range logs {
		for _, dc := range damages {
			t.Run(lc.name+"/"+dc.name, func(t *testing.T) {
				fs := vfs.NewMem()
				l := lc.write(t, fs)
				name := fs.PathJoin(memDir, segmentName(l.segs[len(l.segs)-1].seq))
				require.NoError(t, l.Close())
				flipBit(t, fs, name, dc.off)
				before := readFile(t, fs, name)

				_, err := Open(memDir, nil, Options{FS: fs})
				require.ErrorIs(t, err, ErrCorrupt)
				require.ErrorContains(t, err, "header fails its checksum")
				require.Equal(t, before, readFile(t, fs, name), "the damaged segment must be left as it was")
			})
		}
	}
}

// A crash in rotate, after the new segment's name was made durable and
// before its header records were, leaves a last segment without a valid
// header: a new file (empty or preallocated), or a spare renamed, still
// holding what it held under its old number. Open replaces it and the log
// loses nothing, since nothing was written to it.
func TestOpenRecoversACrashInRotate(t *testing.T) {
	tests := []struct {
		name string
		// content is what the crash left in segment next; prev is the file
		// of the segment before it.
		content func(next uint64, prev []byte) []byte
	}{
		{name: "empty file", content: func(uint64, []byte) []byte { return nil }},
		{name: "preallocated, never written", content: func(uint64, []byte) []byte { return make([]byte, 4096) }},
		{name: "header torn, zeros after", content: func(next uint64, _ []byte) []byte {
			hdr, _ := appendRecord(nil, segmentSeed(next), recHeader, headerPayload(next))
			return append(hdr[:len(hdr)/2], make([]byte, 4096)...)
		}},
		{name: "recycled spare, header never written", content: func(_ uint64, prev []byte) []byte {
			// Its old records check out, chained from its old header.
			return prev
		}},
		{name: "recycled spare, header torn", content: func(next uint64, prev []byte) []byte {
			hdr, _ := appendRecord(nil, segmentSeed(next), recHeader, headerPayload(next))
			b := slices.Clone(prev)
			copy(b, hdr[:len(hdr)/2])
			return b
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			opts := Options{FS: fs}
			l, err := Open(memDir, nil, opts)
			require.NoError(t, err)
			require.NoError(t, l.Bootstrap(confState(1, 2)))
			require.NoError(t, l.Save(hardState(4, 2, 10), entries(1, 20, 4)))
			want := captureState(t, l)
			// rotate's first step: the seal, fsynced.
			cur := l.segs[len(l.segs)-1]
			seal, _ := appendRecord(nil, l.crc, recSeal, nil)
			_, err = cur.f.WriteAt(seal, l.off)
			require.NoError(t, err)
			require.NoError(t, cur.f.Sync())
			require.NoError(t, l.Close())
			next := cur.seq + 1
			prev := readFile(t, fs, fs.PathJoin(memDir, segmentName(cur.seq)))
			writeFile(t, fs, fs.PathJoin(memDir, segmentName(next)), tc.content(next, prev))

			l, err = Open(memDir, nil, opts)
			require.NoError(t, err)
			requireSameState(t, want, captureState(t, l))
			require.Equal(t, []string{segmentName(cur.seq), segmentName(next)}, segmentFiles(t, fs, memDir),
				"the segment is replaced under its number")

			require.NoError(t, l.Save(hardState(5, 1, 20), entries(21, 25, 5)))
			want = captureState(t, l)
			require.NoError(t, l.Close())
			l, err = Open(memDir, nil, opts)
			require.NoError(t, err)
			defer l.Close()
			requireSameState(t, want, captureState(t, l))
		})
	}
}

// Open does not leave a segment holding nothing but header records for a
// new one: a crash loop or rolling restarts of an idle node must not add a
// segment file, and the SegmentBytes it reserves, at every start.
func TestRestartsDoNotAddSegments(t *testing.T) {
	tests := []struct {
		name      string
		bootstrap bool
		// start runs after each Open, as the replica's first Ready might.
		start func(t *testing.T, l *Log, i int)
		crash bool // power loss instead of Close
	}{
		{name: "empty log", start: func(*testing.T, *Log, int) {}},
		{name: "nothing written", bootstrap: true, start: func(*testing.T, *Log, int) {}},
		{name: "a new term at each start", bootstrap: true, start: func(t *testing.T, l *Log, i int) {
			require.NoError(t, l.Save(hardState(uint64(2+i), 1, 5), nil))
		}},
		{name: "a crash at each start", bootstrap: true, crash: true, start: func(t *testing.T, l *Log, i int) {
			require.NoError(t, l.Save(hardState(uint64(2+i), 1, 5), nil))
		}},
	}
	const restarts = 20
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			opts := Options{FS: fs, SegmentBytes: 4 << 20}
			l, err := Open(memDir, nil, opts)
			require.NoError(t, err)
			if tc.bootstrap {
				require.NoError(t, l.Bootstrap(confState(1)))
				require.NoError(t, l.Save(hardState(1, 1, 5), entries(1, 10, 1)))
			}
			require.NoError(t, l.Close())
			var files []string
			for i := range restarts {
				l, err := Open(memDir, nil, opts)
				require.NoError(t, err)
				tc.start(t, l, i)
				want := captureState(t, l)
				if tc.crash {
					fs = fs.CrashClone(vfs.CrashCloneCfg{})
					opts.FS = fs
				}
				require.NoError(t, l.Close())
				l, err = Open(memDir, nil, opts)
				require.NoError(t, err)
				requireSameState(t, want, captureState(t, l))
				require.NoError(t, l.Close())
				if i == 0 {
					files = segmentFiles(t, fs, memDir)
					continue
				}
				require.Equal(t, files, segmentFiles(t, fs, memDir), "restart %d", i)
			}
			require.LessOrEqual(t, len(files), 2)

			// The log goes on from the replaced segment.
			l, err = Open(memDir, nil, opts)
			require.NoError(t, err)
			last, err := l.LastIndex()
			require.NoError(t, err)
			require.NoError(t, l.Save(hardState(100, 1, last), entries(last+1, last+3, 100)))
			want := captureState(t, l)
			require.NoError(t, l.Close())
			l, err = Open(memDir, nil, opts)
			require.NoError(t, err)
			defer l.Close()
			requireSameState(t, want, captureState(t, l))
		})
	}
}

// renameHookFS calls renamed after each rename.
type renameHookFS struct {
	*vfs.MemFS
	renamed func(oldname, newname string)
}

func (r *renameHookFS) Rename(oldname, newname string) error {
	if err := r.MemFS.Rename(oldname, newname); err != nil {
		return err
	}
	if r.renamed != nil {
		r.renamed(oldname, newname)
	}
	return nil
}

// Open replaces a last segment holding only header records by renaming a
// new file over it. When the segments before it were recycled it is the
// only copy of the compaction point and the HardState: a crash before or
// after the rename reached the disk must find one of the two files.
func TestCrashWhileReplacingLastSegment(t *testing.T) {
	fs := &renameHookFS{MemFS: vfs.NewCrashableMem()}
	opts := Options{FS: fs, SegmentBytes: 1024}
	l := compactedManySegments(t, opts)
	want := captureState(t, l)
	require.NoError(t, l.Close())
	l, err := Open(memDir, nil, opts) // rotates, recycles every other segment
	require.NoError(t, err)
	require.Len(t, l.segs, 1)
	require.NoError(t, l.Close())

	checked := 0
	check := func(what string, after *vfs.MemFS) {
		l, err := Open(memDir, nil, Options{FS: after, SegmentBytes: 1024})
		require.NoError(t, err, what)
		requireSameState(t, want, captureState(t, l))
		require.NoError(t, l.Close())
		checked++
	}
	fs.renamed = func(oldname, _ string) {
		if fs.PathBase(oldname) != replaceTempName {
			return
		}
		check("rename lost", fs.CrashClone(vfs.CrashCloneCfg{}))
		d, err := fs.OpenDir(memDir)
		require.NoError(t, err)
		require.NoError(t, d.Sync())
		require.NoError(t, d.Close())
		check("rename kept", fs.CrashClone(vfs.CrashCloneCfg{}))
	}
	l, err = Open(memDir, nil, opts)
	require.NoError(t, err)
	fs.renamed = nil
	require.Equal(t, 2, checked, "the last segment was not replaced")
	requireSameState(t, want, captureState(t, l))
	require.NoError(t, l.Close())
}

// compactedManySegments opens a log at memDir, writes entries 1-100 across
// many small segments and compacts them all away: reopened, the log keeps
// its compaction point and HardState only in its last segment's header.
func compactedManySegments(t *testing.T, opts Options) *Log {
	t.Helper()
	l, err := Open(memDir, nil, opts)
	require.NoError(t, err)
	for i := uint64(1); i <= 100; i += 4 {
		require.NoError(t, l.Save(hardState(3, 1, i+3), entries(i, i+3, 3)))
	}
	require.NoError(t, l.Compact(100, confState(1, 2)))
	return l
}

// The compaction point and HardState after a last segment's header are
// written with the header, in one write fsynced before anything else goes
// into the segment (or, in a segment started on an empty log, the
// compaction point is Bootstrap's own fsynced write). One of them failing
// its checksum while the record after it checks out is damage, not a
// crash: Open refuses the log and leaves the segment as it was, instead of
// taking the segment for one holding no entries and replacing it, which
// dropped every acknowledged record after the damage.
func TestOpenRefusesDamagedHeaderRecordsOfLastSegment(t *testing.T) {
	logs := []struct {
		name  string
		write func(t *testing.T, fs vfs.FS) *Log
	}{
		{name: "bootstrap, then entries", write: func(t *testing.T, fs vfs.FS) *Log {
			l, err := Open(memDir, nil, Options{FS: fs})
			require.NoError(t, err)
			require.NoError(t, l.Bootstrap(confState(1, 2, 3)))
			require.NoError(t, l.Save(hardState(7, 2, 10), entries(1, 20, 7)))
			return l
		}},
		{name: "entries after a reopen, the segments before recycled", write: func(t *testing.T, fs vfs.FS) *Log {
			opts := Options{FS: fs, SegmentBytes: 1024}
			l := compactedManySegments(t, opts)
			require.NoError(t, l.Close())
			l, err := Open(memDir, nil, opts)
			require.NoError(t, err)
			require.Len(t, l.segs, 1)
			require.NoError(t, l.Save(hardState(4, 2, 103), entries(101, 104, 4)))
			return l
		}},
		{name: "nothing written since a reopen, the segments before recycled", write: func(t *testing.T, fs vfs.FS) *Log {
			opts := Options{FS: fs, SegmentBytes: 1024}
			l := compactedManySegments(t, opts)
			require.NoError(t, l.Close())
			l, err := Open(memDir, nil, opts)
			require.NoError(t, err)
			require.Len(t, l.segs, 1)
			return l
		}},
	}
	header, _ := appendRecord(nil, 0, recHeader, headerPayload(0))
	for _, lc := range logs {
		for _, which := range []string{"compaction point", "second record"} {
			t.Run(lc.name+"/"+which, func(t *testing.T) {
				fs := vfs.NewMem()
				l := lc.write(t, fs)
				name := fs.PathJoin(memDir, segmentName(l.segs[len(l.segs)-1].seq))
				require.NoError(t, l.Close())
				b := readFile(t, fs, name)
				off := int64(len(header))
				require.Equal(t, recCompaction, b[off+8])
				if which == "second record" {
					// The HardState of the header records, or the first
					// entry after Bootstrap's compaction point.
					off += recordHeaderLen + int64(binary.BigEndian.Uint32(b[off+4:]))
					if lc.name == "nothing written since a reopen, the segments before recycled" {
						// Nothing after the HardState tells damage from a
						// write torn within its sector: the log ends before it.
						t.Skip("nothing follows the hard state")
					}
				}
				flipBit(t, fs, name, off+recordHeaderLen+1) // in the payload
				before := readFile(t, fs, name)

				_, err := Open(memDir, nil, Options{FS: fs, SegmentBytes: 1024})
				require.ErrorIs(t, err, ErrCorrupt)
				require.ErrorContains(t, err, fmt.Sprintf("%s: the record at offset %d fails its checksum", fs.PathBase(name), off))
				require.Equal(t, before, readFile(t, fs, name), "the damaged segment must be left as it was")
			})
		}
	}
}

// A crash in rotate can tear the header records' write where it crosses a
// sector boundary (a compaction point whose ConfState is large): the
// HardState after the compaction point may have reached the disk while a
// sector in the middle of the compaction point did not, but
// nothing written after them can have. Open replaces the segment, and the
// log loses nothing: the segment before it holds the same state.
func TestOpenRecoversHeaderRecordsTornAcrossSectors(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{FS: fs}
	l, err := Open(memDir, nil, opts)
	require.NoError(t, err)
	var voters []uint64
	for i := range 120 {
		voters = append(voters, 1<<60+uint64(i))
	}
	require.NoError(t, l.Bootstrap(confState(voters...)))
	require.NoError(t, l.Save(hardState(4, 2, 10), entries(1, 20, 4)))
	want := captureState(t, l)
	cur := l.segs[len(l.segs)-1]
	seal, _ := appendRecord(nil, l.crc, recSeal, nil)
	_, err = cur.f.WriteAt(seal, l.off)
	require.NoError(t, err)
	next := cur.seq + 1
	var group []byte
	crc := segmentSeed(next)
	group, crc = appendRecord(group, crc, recHeader, headerPayload(next))
	compStart := len(group)
	group, crc, err = appendProtoRecord(group, crc, recCompaction, l.compaction, proto.Size(l.compaction))
	require.NoError(t, err)
	compEnd := len(group)
	group, crc, err = appendProtoRecord(group, crc, recHardState, l.hardState, proto.Size(l.hardState))
	require.NoError(t, err)
	// An entry written after the header records, for the damaged variant.
	e := entry(21, 4, "x")
	after, _, err := appendProtoRecord(slices.Clone(group), crc, recEntry, e, proto.Size(e))
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.Less(t, compStart, 512)
	require.Greater(t, compEnd, 1024, "the compaction point must span three sectors")
	// The sector in the middle of the compaction point was lost, the
	// HardState in the next one was not.
	torn := append(slices.Clone(group), make([]byte, 4096)...)
	clear(torn[512:1024])
	writeFile(t, fs, fs.PathJoin(memDir, segmentName(next)), torn)

	l, err = Open(memDir, nil, opts)
	require.NoError(t, err)
	requireSameState(t, want, captureState(t, l))
	require.NoError(t, l.Close())

	// A record written after the header records cannot follow them torn:
	// the same bytes lost in the middle of the compaction point are damage.
	name := fs.PathJoin(memDir, segmentName(next))
	damaged := append(after, make([]byte, 4096)...)
	clear(damaged[512:1024])
	writeFile(t, fs, name, damaged)
	before := readFile(t, fs, name) // under -race, MemFS scribbles over what it was given
	_, err = Open(memDir, nil, opts)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, fmt.Sprintf("%s: the record at offset %d fails its checksum", segmentName(next), compStart))
	require.Equal(t, before, readFile(t, fs, name), "the damaged segment must be left as it was")
}
