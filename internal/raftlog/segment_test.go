package raftlog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// segmentedLog writes 200 entries of term 1 to a log of 1 KiB segments,
// compacting nothing, and returns its directory, closed, and the sequence
// numbers of its segments.
func segmentedLog(t *testing.T) (string, []uint64) {
	t.Helper()
	opts := Options{SegmentBytes: 1024}
	l, dir := openTest(t, opts)
	require.NoError(t, l.Bootstrap(confState(1)))
	for i := uint64(1); i <= 200; i += 4 {
		require.NoError(t, l.Save(hardState(1, 1, i-1), entries(i, i+3, 1)))
	}
	var seqs []uint64
	for _, s := range l.segs {
		seqs = append(seqs, s.seq)
	}
	require.Greater(t, len(seqs), 3, "the test needs several segments")
	require.NoError(t, l.Close())
	return dir, seqs
}

// sealOffset returns where the seal of segment seq starts.
func sealOffset(t *testing.T, dir string, seq uint64) int64 {
	t.Helper()
	f, err := vfs.Default.Open(filepath.Join(dir, segmentName(seq)))
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	r := newSegmentReader(f, seq, st.Size())
	for {
		rec, err := r.next()
		require.NoError(t, err)
		if rec.typ == recSeal {
			return rec.off
		}
	}
}

// Damage Open cannot explain by a crash is refused with an error wrapping
// ErrCorrupt, never a panic and never a silently shorter log.
func TestOpenDetectsDamagedSegments(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string, seqs []uint64)
	}{
		{name: "a byte flipped in a sealed segment", damage: func(t *testing.T, dir string, seqs []uint64) {
			p := filepath.Join(dir, segmentName(seqs[1]))
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			b[sealOffset(t, dir, seqs[1])/2] ^= 0x40
			require.NoError(t, os.WriteFile(p, b, 0o644))
		}},
		{name: "a sealed segment cut short", damage: func(t *testing.T, dir string, seqs []uint64) {
			require.NoError(t, os.Truncate(filepath.Join(dir, segmentName(seqs[1])), sealOffset(t, dir, seqs[1])/2))
		}},
		{name: "a sealed segment without its seal", damage: func(t *testing.T, dir string, seqs []uint64) {
			// Nothing but the seal is lost, yet a sealed file changed.
			require.NoError(t, os.Truncate(filepath.Join(dir, segmentName(seqs[1])), sealOffset(t, dir, seqs[1])))
		}},
		{name: "a segment missing in the middle", damage: func(t *testing.T, dir string, seqs []uint64) {
			require.NoError(t, os.Remove(filepath.Join(dir, segmentName(seqs[1]))))
		}},
		{name: "the first segment missing", damage: func(t *testing.T, dir string, seqs []uint64) {
			require.NoError(t, os.Remove(filepath.Join(dir, segmentName(seqs[0]))))
		}},
		{name: "a segment under another's name", damage: func(t *testing.T, dir string, seqs []uint64) {
			b, err := os.ReadFile(filepath.Join(dir, segmentName(seqs[2])))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, segmentName(seqs[1])), b, 0o644))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, seqs := segmentedLog(t)
			tc.damage(t, dir, seqs)
			_, err := Open(dir, nil, Options{SegmentBytes: 1024})
			require.ErrorIs(t, err, ErrCorrupt)
			t.Log(err)
		})
	}
}

// The last segment may end anywhere: a crash tears the write in progress,
// and what follows the last whole record is not part of the log.
func TestOpenDropsATornTail(t *testing.T) {
	opts := Options{SegmentBytes: 1 << 20}
	l, dir := openTest(t, opts)
	require.NoError(t, l.Save(hardState(1, 1, 2), entries(1, 10, 1)))
	p := l.pos[6] // entry 7
	name := filepath.Join(dir, segmentName(p.seg.seq))
	require.NoError(t, l.Close())

	// Entry 7 half written, 8 to 10 never: the log ends at 6.
	require.NoError(t, os.Truncate(name, p.off+int64(p.n)/2))
	l = reopenTest(t, dir, opts)
	last, err := l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(6), last)
	ents, err := l.Entries(1, 7, ^uint64(0))
	require.NoError(t, err)
	requireEntriesEqual(t, entries(1, 6, 1), ents)

	// The log goes on from there, and the torn bytes are never read again.
	require.NoError(t, l.Save(hardState(2, 1, 6), entries(7, 8, 2)))
	require.NoError(t, l.Close())
	l = reopenTest(t, dir, opts)
	ents, err = l.Entries(1, 9, ^uint64(0))
	require.NoError(t, err)
	requireEntriesEqual(t, append(entries(1, 6, 1), entries(7, 8, 2)...), ents)
}

// A segment written by a newer format is refused as such, not as damage.
func TestOpenRefusesANewerFormat(t *testing.T) {
	dir := t.TempDir()
	buf, _ := appendRecord(nil, segmentSeed(1), recHeader, append([]byte{formatVersion + 1}, 0, 0, 0, 0, 0, 0, 0, 1))
	require.NoError(t, os.WriteFile(filepath.Join(dir, segmentName(1)), buf, 0o644))
	// A second segment makes the first one not the last: it must be read.
	require.NoError(t, os.WriteFile(filepath.Join(dir, segmentName(2)), nil, 0o644))
	_, err := Open(dir, nil, Options{})
	require.ErrorContains(t, err, "unsupported format version 3")
	require.NotErrorIs(t, err, ErrCorrupt)
}

// Retired segments become spares, written over as the segments to come;
// the log's files stay bounded under a long write load.
func TestSegmentsAreRecycled(t *testing.T) {
	opts := Options{SegmentBytes: 2048, SpareSegments: 2}
	l, dir := openTest(t, opts)
	for i := uint64(1); i <= 2000; i += 4 {
		require.NoError(t, l.Save(hardState(1, 1, i+3), entries(i, i+3, 1)))
		if i > 20 {
			require.NoError(t, l.Compact(i-10, nil))
		}
	}
	st := l.Stats()
	require.LessOrEqual(t, st.Segments, 3)
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.LessOrEqual(t, len(names), st.Segments+2+1, "live segments, two spares and the lock")
	last := l.segs[len(l.segs)-1].seq
	require.Greater(t, last, uint64(20), "the log moved through many segments")
	require.NoError(t, l.Close())
	l = reopenTest(t, dir, opts)
	got, err := l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(2000), got)
}

// On a real disk a new segment is created preallocated; once it is written
// to in earnest a spare full of zeros is prefilled in the background, and
// the log moves to it at the next write: segments are then written over,
// never extended.
func TestASpareIsPrefilled(t *testing.T) {
	const segBytes = 64 << 10
	l, dir := openTest(t, Options{SegmentBytes: segBytes})
	require.True(t, l.fresh, "a new log has no spare to start in")
	first := l.segs[len(l.segs)-1].seq
	for i := uint64(1); l.off < segBytes/4; i++ {
		require.NoError(t, l.Save(hardState(1, 1, i-1), []*pb.Entry{entry(i, 1, string(make([]byte, 1000)))}))
	}
	l.prepWG.Wait()
	require.Len(t, l.spares, 1)
	fi, err := os.Stat(filepath.Join(dir, spareName(l.spares[0])))
	require.NoError(t, err)
	require.Equal(t, int64(segBytes), fi.Size())

	last, err := l.LastIndex()
	require.NoError(t, err)
	require.NoError(t, l.Save(hardState(1, 1, last), entries(last+1, last+1, 1)))
	require.False(t, l.fresh, "the log did not move to the spare")
	require.Equal(t, first+1, l.segs[len(l.segs)-1].seq)
	require.Empty(t, l.spares)
	fi, err = os.Stat(filepath.Join(dir, segmentName(first+1)))
	require.NoError(t, err)
	require.Equal(t, int64(segBytes), fi.Size())
	require.NoError(t, l.Close())
	l = reopenTest(t, dir, Options{SegmentBytes: segBytes})
	got, err := l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, last+1, got)
}

// An entry marshalled in place makes the same record, byte for byte, as
// one marshalled apart, and a wrong size is refused rather than written.
func TestProtoRecordMatchesMarshalledRecord(t *testing.T) {
	big := make([]byte, 8192)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name string
		e    *pb.Entry
	}{
		{"no data", &pb.Entry{Index: new(uint64(1)), Term: new(uint64(1))}},
		{"small", &pb.Entry{Index: new(uint64(300)), Term: new(uint64(2)), Data: []byte("set k")}},
		{"8 KiB", &pb.Entry{Index: new(uint64(1 << 40)), Term: new(uint64(9)), Data: big}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := proto.Marshal(tc.e)
			require.NoError(t, err)
			prefix := []byte("earlier records")
			want, wantCRC := appendRecord(append([]byte(nil), prefix...), 42, recEntry, v)
			got, gotCRC, err := appendProtoRecord(append([]byte(nil), prefix...), 42, recEntry, tc.e, proto.Size(tc.e))
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Equal(t, wantCRC, gotCRC)

			got, gotCRC, err = appendProtoRecord(append([]byte(nil), prefix...), 42, recEntry, tc.e, proto.Size(tc.e)+1)
			require.Error(t, err)
			require.Equal(t, prefix, got)
			require.Equal(t, uint32(42), gotCRC)
		})
	}
}
