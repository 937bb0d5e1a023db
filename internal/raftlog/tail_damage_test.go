package raftlog

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// tailWrites fills a log on fs with writes of every kind a last segment
// holds after its header records, each acknowledged before the next, and
// returns the name of its only segment, the offset where each write starts
// in it (the last one's end appended) and the state after each write
// (states[0] before the first).
func tailWrites(t *testing.T, fs vfs.FS) (name string, starts []int64, states []logState) {
	t.Helper()
	l, err := Open(memDir, nil, Options{FS: fs})
	require.NoError(t, err)
	require.NoError(t, l.Bootstrap(confState(1, 2, 3)))
	require.NoError(t, l.Save(hardState(1, 1, 0), entries(1, 2, 1)))
	writes := []func(){
		func() { require.NoError(t, l.Save(hardState(1, 1, 1), entries(3, 3, 1))) },
		func() { require.NoError(t, l.Save(hardState(1, 1, 2), nil)) }, // commit only, not synced
		func() { require.NoError(t, l.Save(hardState(2, 2, 2), entries(4, 6, 2))) },
		func() { require.NoError(t, l.Compact(2, nil)) },
		func() { require.NoError(t, l.Save(hardState(2, 2, 5), entries(7, 7, 2))) },
		func() { require.NoError(t, l.Save(hardState(3, 3, 5), nil)) }, // a new term, synced
		func() { require.NoError(t, l.Save(nil, entries(8, 9, 3))) },
	}
	states = append(states, captureState(t, l))
	for _, w := range writes {
		starts = append(starts, l.off)
		w()
		states = append(states, captureState(t, l))
	}
	starts = append(starts, l.off)
	require.Len(t, l.segs, 1)
	name = fs.PathJoin(memDir, segmentName(l.segs[0].seq))
	require.NoError(t, l.Close())
	return name, starts, states
}

// recordStart returns where the record holding byte off of a segment
// starts, reading the records chained from the segment's seed.
func recordStart(t *testing.T, b []byte, seq uint64, off int64) int64 {
	t.Helper()
	crc := segmentSeed(seq)
	var at int64
	for at < int64(len(b)) {
		n := int64(recordHeaderLen) + int64(uint32(b[at+4])<<24|uint32(b[at+5])<<16|uint32(b[at+6])<<8|uint32(b[at+7]))
		if off < at+n {
			return at
		}
		_, crc = appendRecord(nil, crc, b[at+8], b[at+recordHeaderLen:at+n])
		at += n
	}
	t.Fatalf("offset %d beyond the records", off)
	return 0
}

// A bit flipped anywhere in the records of the last segment after its
// header records is refused as damage, naming the file and the record's
// offset, unless it lies in the last write, which a crash could have torn:
// then the log ends before that write and keeps every earlier one. Never
// is a record that fails its checksum taken for the end of the log while
// acknowledged writes follow it.
func TestOpenRefusesABitFlipBeforeTheLastWrite(t *testing.T) {
	fs := vfs.NewMem()
	name, starts, states := tailWrites(t, fs)
	clean := readFile(t, fs, name)
	last := len(starts) - 2 // the last write runs from starts[last] to starts[last+1]
	refused, torn := 0, 0
	for off := starts[0]; off < starts[len(starts)-1]; off++ {
		for _, bit := range []byte{0x01, 0x80} {
			b := append([]byte(nil), clean...)
			b[off] ^= bit
			mem := vfs.NewMem()
			require.NoError(t, mem.MkdirAll(memDir, 0o755))
			writeFile(t, mem, name, b)
			what := fmt.Sprintf("bit %#x of byte %d flipped", bit, off)
			before := readFile(t, mem, name) // under -race, MemFS scribbles over what it was given

			l, err := Open(memDir, nil, Options{FS: mem})
			if err != nil {
				require.ErrorIs(t, err, ErrCorrupt, what)
				rec := recordStart(t, clean, 1, off)
				require.ErrorContains(t, err, fmt.Sprintf("%s: the record at offset %d fails its checksum", segmentName(1), rec), what)
				require.Equal(t, before, readFile(t, mem, name), "%s: the damaged segment must be left as it was", what)
				refused++
				continue
			}
			require.GreaterOrEqual(t, off, starts[last], "%s: the log was cut short, though acknowledged writes follow the flipped byte", what)
			requireTornLastWrite(t, states[last], states[last+1], captureState(t, l), what)
			require.NoError(t, l.Close())
			torn++
		}
	}
	t.Logf("%d flips refused, %d taken for a torn last write", refused, torn)
	require.Positive(t, refused)
}

// requireTornLastWrite requires got to be the state before the last write
// (before), or before with some of the entries of the last write (after):
// what a crash tearing that write leaves.
func requireTornLastWrite(t *testing.T, before, after, got logState, what string) {
	t.Helper()
	require.True(t, got.last >= before.last && got.last <= after.last, "%s: last index %d, want %d to %d", what, got.last, before.last, after.last)
	want := before
	if got.last > before.last {
		want.ents = after.ents[:got.last-after.first+1]
		want.last = got.last
	}
	requireSameState(t, want, got)
}

// A crash that loses the end of what was written (the file cut at any
// length, or its tail zeroed from any offset, as a preallocated segment
// holds) is never refused: Open keeps every write that ends before the
// cut, and of the write the cut falls in whatever whole records remain.
func TestOpenRecoversALostTailAtEveryOffset(t *testing.T) {
	fs := vfs.NewMem()
	name, starts, states := tailWrites(t, fs)
	clean := readFile(t, fs, name)
	for cut := starts[0]; cut <= starts[len(starts)-1]; cut++ {
		// The write the cut falls in: writes before k survived whole.
		k := 0
		for k+1 < len(starts) && starts[k+1] <= cut {
			k++
		}
		for _, zeroed := range []bool{false, true} {
			b := append([]byte(nil), clean[:cut]...)
			if zeroed {
				b = append(b, make([]byte, len(clean)-int(cut)+512)...)
			}
			mem := vfs.NewMem()
			require.NoError(t, mem.MkdirAll(memDir, 0o755))
			writeFile(t, mem, name, b)
			what := fmt.Sprintf("cut at %d (zeroed after: %v)", cut, zeroed)
			l, err := Open(memDir, nil, Options{FS: mem})
			require.NoError(t, err, what)
			if k == len(starts)-1 {
				requireSameState(t, states[k], captureState(t, l))
			} else {
				requireTornLastWrite(t, states[k], states[k+1], captureState(t, l), what)
			}
			require.NoError(t, l.Close())
		}
	}
}
