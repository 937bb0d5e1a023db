package fsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// FuzzDecodeItem checks the stored item's decoder, which reads whatever the
// state store (or a snapshot a peer streamed) holds: it never panics, it
// takes only the three versions it knows, and an item of version 2, or of
// version 3 with meta state, that it accepts encodes back to the same
// bytes.
func FuzzDecodeItem(f *testing.F) {
	f.Add(encodeItem(nil, &command.Item{Flags: 7, ExpiresAt: 1_700_000_000_123_456_789, CAS: 42, StoredAt: 1_699_999_999_000_000_000, Value: []byte("hello")}))
	f.Add(encodeItem(nil, &command.Item{}))
	v1 := encodeItem(nil, &command.Item{ExpiresAt: 1_700_000_000, Value: []byte("x")})
	v1[0] = itemVersionSec
	f.Add(v1)
	f.Add(encodeItem(nil, &command.Item{Flags: 1, CAS: 3, Value: []byte("meta"), Fetched: true, AccessedAt: -1, Stale: true, TokenSent: true}))
	f.Add(encodeItem(nil, &command.Item{AccessedAt: 1_800_000_000_000_000_000}))
	f.Add([]byte{})
	f.Add([]byte{itemVersion, 0, 0})
	f.Add(bytes.Repeat([]byte{0xff}, itemHeaderLen))
	f.Add(append([]byte{itemVersionMeta}, make([]byte, itemHeaderLen)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var it command.Item
		if err := decodeItem(b, &it); err != nil {
			return
		}
		hdr := itemHeaderLen
		switch firstByte(b) {
		case itemVersionSec, itemVersion:
		case itemVersionMeta:
			hdr = itemMetaHeaderLen
			if b[itemHeaderLen]&^itemMetaKnown != 0 {
				t.Fatalf("accepted meta bits %#x", b[itemHeaderLen])
			}
		default:
			t.Fatalf("accepted version %d", firstByte(b))
		}
		if len(b) < hdr {
			t.Fatalf("accepted %d bytes of version %d", len(b), b[0])
		}
		if !bytes.Equal(it.Value, b[hdr:]) {
			t.Fatalf("value %q, want the %d bytes after the header", it.Value, len(b)-hdr)
		}
		_ = it.ExpirySec()
		again := encodeItem(nil, &it)
		switch {
		case b[0] == itemVersion || b[0] == itemVersionMeta && hasMeta(&it):
			if !bytes.Equal(again, b) {
				t.Fatalf("decoded item %+v encodes to %x, not %x", it, again, b)
			}
		case b[0] == itemVersionMeta:
			// A version 3 header with no meta state, which nothing writes:
			// the same item, in version 2.
			var back command.Item
			if err := decodeItem(again, &back); err != nil || again[0] != itemVersion || back.CAS != it.CAS || !bytes.Equal(back.Value, it.Value) {
				t.Fatalf("item %+v without meta state encodes to %x", it, again)
			}
		}
	})
}

// TestItemVersions: an item without meta state is written in version 2,
// which kvd before cluster version 5 reads; one with any of it in version
// 3, which keeps all of it; and decoding into a reused Item never leaves a
// meta field of the item decoded before.
func TestItemVersions(t *testing.T) {
	plain := command.Item{Flags: 9, ExpiresAt: t0 + 1, CAS: 77, StoredAt: t0, Value: []byte("v")}
	enc := encodeItem(nil, &plain)
	require.Equal(t, byte(itemVersion), enc[0])
	require.Len(t, enc, itemHeaderLen+1)

	for _, meta := range []command.Item{{Fetched: true}, {AccessedAt: t0 + 5}, {Stale: true}, {TokenSent: true},
		{Fetched: true, AccessedAt: t0, Stale: true, TokenSent: true}} {
		it := plain
		it.Fetched, it.AccessedAt, it.Stale, it.TokenSent = meta.Fetched, meta.AccessedAt, meta.Stale, meta.TokenSent
		enc := encodeItem(nil, &it)
		require.Equal(t, byte(itemVersionMeta), enc[0], "%+v", meta)
		require.Len(t, enc, itemMetaHeaderLen+1)
		var got command.Item
		require.NoError(t, decodeItem(enc, &got))
		require.Equal(t, it, got)

		// The same Item, reused for a version 2 item, loses that state.
		require.NoError(t, decodeItem(encodeItem(nil, &plain), &got))
		require.Equal(t, plain, got)
	}

	bad := encodeItem(nil, &command.Item{Stale: true})
	bad[itemHeaderLen] |= 0x80
	var it command.Item
	require.Error(t, decodeItem(bad, &it), "an unknown meta bit")
	require.Error(t, decodeItem(bad[:itemMetaHeaderLen-1], &it), "a version 3 header cut short")
	require.Error(t, decodeItem([]byte{4, 0}, &it), "a version yet to come")
}
