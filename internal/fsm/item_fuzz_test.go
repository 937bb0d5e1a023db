package fsm

import (
	"bytes"
	"testing"

	"github.com/kvd-project/kvd/internal/command"
)

// FuzzDecodeItem checks the stored item's decoder, which reads whatever the
// state store (or a snapshot a peer streamed) holds: it never panics, it
// takes only the two versions it knows, and a version 2 item it accepts
// encodes back to the same bytes.
func FuzzDecodeItem(f *testing.F) {
	f.Add(encodeItem(nil, &command.Item{Flags: 7, ExpiresAt: 1_700_000_000_123_456_789, CAS: 42, StoredAt: 1_699_999_999_000_000_000, Value: []byte("hello")}))
	f.Add(encodeItem(nil, &command.Item{}))
	v1 := encodeItem(nil, &command.Item{ExpiresAt: 1_700_000_000, Value: []byte("x")})
	v1[0] = itemVersionSec
	f.Add(v1)
	f.Add([]byte{})
	f.Add([]byte{itemVersion, 0, 0})
	f.Add(bytes.Repeat([]byte{0xff}, itemHeaderLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		var it command.Item
		if err := decodeItem(b, &it); err != nil {
			return
		}
		if len(b) < itemHeaderLen || b[0] != itemVersion && b[0] != itemVersionSec {
			t.Fatalf("accepted %d bytes of version %d", len(b), firstByte(b))
		}
		if !bytes.Equal(it.Value, b[itemHeaderLen:]) {
			t.Fatalf("value %q, want the %d bytes after the header", it.Value, len(b)-itemHeaderLen)
		}
		_ = it.ExpirySec()
		if b[0] == itemVersion {
			if again := encodeItem(nil, &it); !bytes.Equal(again, b) {
				t.Fatalf("decoded item %+v encodes to %x, not %x", it, again, b)
			}
		}
	})
}
