package command

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeNewerVersionBeforeLength: an entry of a newer format version is
// ErrUnsupported whatever its length, since a newer format may have a
// shorter header; judged corrupt, it would be skipped here and applied by
// the nodes that know it.
func TestDecodeNewerVersionBeforeLength(t *testing.T) {
	for n := 1; n < headerLen; n++ {
		data := make([]byte, n)
		data[0] = Version + 1
		var c Command
		err := Decode(data, &c)
		require.ErrorIs(t, err, ErrUnsupported, "%d bytes", n)
		require.NotErrorIs(t, err, ErrCorrupt, "%d bytes", n)
	}
	var c Command
	require.ErrorIs(t, Decode([]byte{}, &c), ErrCorrupt)
	require.ErrorIs(t, Decode([]byte{0}, &c), ErrCorrupt)
	require.ErrorIs(t, Decode([]byte{Version}, &c), ErrCorrupt)
}

// TestEncodeRejectsWhatDecodeRejects: an OpExpire item key Decode refuses
// (empty, over MaxKeyLen) is refused by Encode too, and a failed Encode
// leaves the caller's buffer as it was.
func TestEncodeRejectsWhatDecodeRejects(t *testing.T) {
	for _, c := range []Command{
		{Op: OpExpire, Expired: []KeyCAS{{Key: []byte("ok"), CAS: 1}, {Key: nil, CAS: 2}}},
		{Op: OpExpire, Expired: []KeyCAS{{Key: bytes.Repeat([]byte("k"), MaxKeyLen+1), CAS: 1}}},
		{Op: OpExpire, Expired: make([]KeyCAS, MaxExpired+1)},
		{Op: OpMember, Member: MemberAttrs{HTTPAddr: string(bytes.Repeat([]byte("h"), MaxAttrLen+1))}},
	} {
		prefix := []byte("kept")
		out, err := Encode(prefix, &c)
		require.Error(t, err, c.Op.String())
		require.Equal(t, []byte("kept"), out, "%s: a failed Encode appends nothing", c.Op)
	}

	// At the edges Encode accepts, Decode accepts the result.
	edge := Command{Op: OpExpire, ReqID: 1<<64 - 1, Stamp: -1, Expired: []KeyCAS{
		{Key: []byte{0xff}, CAS: 0}, {Key: bytes.Repeat([]byte{0xff}, MaxKeyLen), CAS: 1<<64 - 1},
	}}
	b, err := Encode(nil, &edge)
	require.NoError(t, err)
	var got Command
	require.NoError(t, Decode(b, &got))
	require.Equal(t, edge, got)
}
