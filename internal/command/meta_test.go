package command

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// metaCases are the meta ops as TestRoundTrip and FuzzDecode take them:
// each optional field both present and absent.
var metaCases = []Command{
	{Op: OpMetaGet, ReqID: 30, Stamp: 5, Key: []byte("g")},
	{Op: OpMetaGet, ReqID: 31, Key: []byte("g"), Meta: MetaWantValue | MetaNoBump},
	{Op: OpMetaGet, ReqID: 32, Key: []byte("g"), Meta: MetaHasTTL | MetaVivify | MetaRecache | MetaHasNewCAS | MetaWantValue,
		Exptime: -1, Vivify: 30, Recache: 1<<63 - 1, NewCAS: 1<<64 - 1},
	{Op: OpMetaStore, ReqID: 33, Key: []byte("s"), Mode: ModeSet, Value: []byte("v"), Flags: 1, Exptime: 100},
	{Op: OpMetaStore, ReqID: 34, Key: []byte("s"), Mode: ModeReplace, Value: []byte{}, Meta: MetaHasCAS | MetaHasNewCAS | MetaInvalidate, CAS: 0, NewCAS: 9},
	{Op: OpMetaStore, ReqID: 35, Key: []byte("s"), Mode: ModeAdd, Value: []byte("v")},
	{Op: OpMetaStore, ReqID: 36, Key: []byte("s"), Mode: ModeAppend, Value: []byte("tail"), MaxSize: 1 << 20, Meta: MetaHasCAS, CAS: 4},
	{Op: OpMetaStore, ReqID: 37, Key: []byte("s"), Mode: ModePrepend, Value: []byte("head"), MaxSize: 7},
	{Op: OpMetaDelete, ReqID: 38, Key: []byte("d")},
	{Op: OpMetaDelete, ReqID: 39, Key: []byte("d"), Meta: MetaHasCAS | MetaHasNewCAS | MetaHasTTL | MetaInvalidate | MetaRemoveValue,
		CAS: 3, NewCAS: 4, Exptime: 60, Flags: 0xFFFFFFFF},
	{Op: OpMetaDelete, ReqID: 40, Key: []byte("d"), Meta: MetaInvalidate},
	{Op: OpMetaArith, ReqID: 41, Key: []byte("n"), Delta: 1},
	{Op: OpMetaArith, ReqID: 42, Key: []byte("n"), Delta: 1<<64 - 1, Meta: MetaHasCAS | MetaHasNewCAS | MetaHasTTL | MetaVivify | MetaDecr,
		CAS: 1, NewCAS: 2, Exptime: -5, Vivify: 2592001, Initial: 1<<64 - 1},
	{Op: OpAccess, ReqID: 43, Accessed: []KeyCAS{{Key: []byte("x"), CAS: 5, StoredAt: 1_800_000_000_000_000_007}, {Key: []byte("y"), CAS: 6}}},
	{Op: OpAccess, ReqID: 44, Accessed: []KeyCAS{}},
}

// TestMetaEncodeWritesOnlyWhatItsOpCarries: Meta bits an op does not
// carry, and fields their bits do not announce, are not written (Decode
// would reject them, or leave them out); a Mode of 0 is ModeSet.
func TestMetaEncodeWritesOnlyWhatItsOpCarries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want Command
	}{
		{"mode 0 is set",
			Command{Op: OpMetaStore, Key: []byte("k"), Value: []byte("v")},
			Command{Op: OpMetaStore, Key: []byte("k"), Value: []byte("v"), Mode: ModeSet}},
		{"a set carries no size limit, and ms no vivify",
			Command{Op: OpMetaStore, Key: []byte("k"), Value: []byte("v"), Mode: ModeSet, MaxSize: 9, Meta: MetaVivify | MetaDecr, Vivify: 3},
			Command{Op: OpMetaStore, Key: []byte("k"), Value: []byte("v"), Mode: ModeSet}},
		{"fields without their bits",
			Command{Op: OpMetaGet, Key: []byte("k"), Exptime: 1, Vivify: 2, Recache: 3, NewCAS: 4, Meta: MetaHasCAS | MetaInvalidate, CAS: 5},
			Command{Op: OpMetaGet, Key: []byte("k")}},
		{"md's flags only with x",
			Command{Op: OpMetaDelete, Key: []byte("k"), Flags: 5, Value: []byte("v")},
			Command{Op: OpMetaDelete, Key: []byte("k")}},
		{"ma's initial only with vivify",
			Command{Op: OpMetaArith, Key: []byte("k"), Delta: 1, Initial: 7, Decr: true, Meta: MetaWantValue},
			Command{Op: OpMetaArith, Key: []byte("k"), Delta: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Encode(nil, &tc.in)
			require.NoError(t, err)
			var got Command
			require.NoError(t, Decode(b, &got))
			if len(got.Value) == 0 {
				got.Value = nil
			}
			if len(tc.want.Value) == 0 {
				tc.want.Value = nil
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestMetaEncodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Command
	}{
		{"bad mode", Command{Op: OpMetaStore, Key: []byte("k"), Mode: 'X'}},
		{"lower-case mode", Command{Op: OpMetaStore, Key: []byte("k"), Mode: 's'}},
		{"meta get without a key", Command{Op: OpMetaGet}},
		{"meta delete with a long key", Command{Op: OpMetaDelete, Key: bytes.Repeat([]byte("k"), MaxKeyLen+1)}},
		{"too many accessed", Command{Op: OpAccess, Accessed: make([]KeyCAS, MaxExpired+1)}},
		{"an accessed item without a key", Command{Op: OpAccess, Accessed: []KeyCAS{{Key: []byte("k")}, {}}}},
		{"an accessed item with a long key", Command{Op: OpAccess, Accessed: []KeyCAS{{Key: bytes.Repeat([]byte("k"), MaxKeyLen+1)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Encode([]byte("kept"), &tc.c)
			require.Error(t, err)
			require.Equal(t, []byte("kept"), out, "a failed Encode appends nothing")
		})
	}
}

// TestMetaDecodeRejects: flag bits its op does not carry (or no op does),
// a mode that is none of ms's, and a count past MaxExpired are corrupt.
func TestMetaDecodeRejects(t *testing.T) {
	enc := func(c Command) []byte {
		b, err := Encode(nil, &c)
		require.NoError(t, err)
		return b
	}
	metaAt := headerLen + 2 // after the key's length and its one byte
	withMeta := func(b []byte, m uint16) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint16(b[metaAt:], m)
		return b
	}
	store := enc(Command{Op: OpMetaStore, Key: []byte("k"), Mode: ModeSet, Value: []byte("v")})
	withMode := func(m byte) []byte {
		b := bytes.Clone(store)
		b[metaAt+2] = m
		return b
	}
	get := enc(Command{Op: OpMetaGet, Key: []byte("k")})
	del := enc(Command{Op: OpMetaDelete, Key: []byte("k")})
	arith := enc(Command{Op: OpMetaArith, Key: []byte("k"), Delta: 1})
	access := enc(Command{Op: OpAccess, Accessed: []KeyCAS{{Key: []byte("k")}}})
	tooMany := bytes.Clone(access[:headerLen])
	tooMany = binary.AppendUvarint(tooMany, MaxExpired+1)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"an unknown meta bit", withMeta(get, uint16(metaKnown)+1)},
		{"the top meta bit", withMeta(del, 1<<15)},
		{"mg with C", withMeta(get, uint16(MetaHasCAS))},
		{"mg with ma's decrement", withMeta(get, uint16(MetaDecr))},
		{"ms with T", withMeta(store, uint16(MetaHasTTL))},
		{"ms with x", withMeta(store, uint16(MetaRemoveValue))},
		{"md with v", withMeta(del, uint16(MetaWantValue))},
		{"ma with I", withMeta(arith, uint16(MetaInvalidate))},
		{"mode 0", withMode(0)},
		{"mode X", withMode('X')},
		{"mode s", withMode('s')},
		{"access of too many", tooMany},
		{"access of an empty key", append(bytes.Clone(access[:headerLen]), 1, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Command
			err := Decode(tc.data, &c)
			require.ErrorIs(t, err, ErrCorrupt)
			require.NotErrorIs(t, err, ErrUnsupported)
		})
	}
	// The same bytes with valid bits decode: the tests above changed only
	// what they say.
	var c Command
	require.NoError(t, Decode(withMeta(get, uint16(MetaNoBump)), &c))
	require.NoError(t, Decode(withMode(ModeAdd), &c))
}
