package transport

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A peer that declares the largest frame and sends a few bytes must not
// make the reader allocate the declared size: memory follows what arrives.
func TestReadFrameAllocatesWhatArrives(t *testing.T) {
	for _, tc := range []struct {
		name     string
		declared uint32
		sent     int
	}{
		{"max frame, a few bytes", MaxFrameSize, 100},
		{"max frame, one chunk and a bit", MaxFrameSize, frameReadChunk + 1},
		{"8 MiB frame, nothing", 8 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append(binary.BigEndian.AppendUint32(nil, tc.declared), make([]byte, tc.sent)...)
			var buf []byte
			_, err := readFrame(bytes.NewReader(in), &buf)
			require.ErrorIs(t, err, io.ErrUnexpectedEOF)
			require.LessOrEqual(t, cap(buf), 4*frameReadChunk+2*tc.sent,
				"a truncated frame of %d declared bytes allocated %d bytes for %d received", tc.declared, cap(buf), tc.sent)
		})
	}
}

// Frames larger than the first growth step, and a reused buffer, still read
// exactly their bytes; a buffer grown for a frame of retainBytes is not
// larger, so the reader keeps it for the next frame.
func TestReadFrameGrowsAndReuses(t *testing.T) {
	var in []byte
	var want [][]byte
	for i, n := range []int{retainBytes, 10, 5*frameReadChunk + 7, 1} {
		body := bytes.Repeat([]byte{byte(i + 1)}, n)
		body[n-1] = 0xee
		want = append(want, body)
		in = append(in, binary.BigEndian.AppendUint32(nil, uint32(n))...)
		in = append(in, body...)
	}
	r := bytes.NewReader(in)
	var buf []byte
	for i, w := range want {
		got, err := readFrame(r, &buf)
		require.NoError(t, err, "frame %d", i)
		require.True(t, bytes.Equal(w, got), "frame %d differs", i)
		require.Equal(t, retainBytes, cap(buf), "frame %d", i)
	}
	_, err := readFrame(r, &buf)
	require.ErrorIs(t, err, io.EOF)
}

// A sender that connects before it becomes a peer (a joining node that
// dials us before its address is published) must have what it sends
// counted once AddPeer makes it one, on the same connection.
func TestTCPReceivedCountsPeerAddedAfterConnect(t *testing.T) {
	checkNoLeak(t)
	rec2 := newRecorder()
	t2 := newTCP(t, fastConfig(7, 2, nil), rec2, nil)
	t1 := newTCP(t, fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), newRecorder(), nil)

	t1.Send([]*pb.Message{app(1, 2, 1)})
	waitFor(t, "first message stepped", func() bool { return rec2.count(1) == 1 })
	t2.AddPeer(1, t1.Addr())
	t1.Send([]*pb.Message{app(1, 2, 2), app(1, 2, 3)})
	waitFor(t, "later messages stepped", func() bool { return rec2.count(1) == 3 })
	require.Equal(t, uint64(1), t1.Stats().Peers[2].Dials, "the connection was replaced")
	require.Equal(t, uint64(2), t2.Stats().Peers[1].Received,
		"messages stepped after AddPeer on an existing connection not counted")
}
