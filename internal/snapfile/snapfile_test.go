package snapfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func sample() (Header, []Record) {
	h := Header{KVDVersion: "0.1.0-test", ClusterID: 0xfeedface, Member: "n2", Applied: 1234, Term: 7,
		ClusterVersion: 6, CreatedNs: 1_700_000_000_123_456_789, ItemsEstimate: 4, BytesEstimate: 20}
	recs := []Record{
		{Key: []byte("a"), Flags: 0, Value: []byte("one")},
		{Key: []byte("b"), Flags: 0xffffffff, ExpiresAt: 1_800_000_000_000_000_000, Value: []byte("two")},
		{Key: []byte("empty"), Flags: 42, Value: nil},
		{Key: bytes.Repeat([]byte{'k'}, MaxKeyLen), Flags: 1, Value: []byte("\x00\r\nEND\r\n")},
	}
	return h, recs
}

func encode(t testing.TB, h Header, recs []Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.Add(r))
	}
	tr, err := w.Close()
	require.NoError(t, err)
	require.Equal(t, uint64(len(recs)), tr.Items)
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	h, recs := sample()
	for _, tc := range []struct {
		name string
		recs []Record
	}{
		{"no items", nil},
		{"items", recs},
		{"large value", []Record{{Key: []byte("big"), Value: bytes.Repeat([]byte("v"), 3<<20+5)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := encode(t, h, tc.recs)
			var got []Record
			gh, tr, err := Verify(bytes.NewReader(b), func(r Record) error {
				got = append(got, Record{Key: bytes.Clone(r.Key), Flags: r.Flags, ExpiresAt: r.ExpiresAt, Value: bytes.Clone(r.Value)})
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, h, gh)
			require.Equal(t, uint64(len(tc.recs)), tr.Items)
			require.Len(t, got, len(tc.recs))
			for i := range got {
				require.Equal(t, tc.recs[i].Key, got[i].Key)
				require.Equal(t, tc.recs[i].Flags, got[i].Flags)
				require.Equal(t, tc.recs[i].ExpiresAt, got[i].ExpiresAt)
				require.Equal(t, len(tc.recs[i].Value), len(got[i].Value))
				require.True(t, bytes.Equal(tc.recs[i].Value, got[i].Value))
			}
		})
	}
}

func TestWriterRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  Record
	}{
		{"empty key", Record{Value: []byte("x")}},
		{"long key", Record{Key: bytes.Repeat([]byte{'k'}, MaxKeyLen+1)}},
		{"negative expiry", Record{Key: []byte("k"), ExpiresAt: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewWriter(io.Discard, Header{})
			require.NoError(t, err)
			require.Error(t, w.Add(tc.rec))
		})
	}
}

func TestReaderNamesTheDamage(t *testing.T) {
	h, recs := sample()
	good := encode(t, h, recs)
	newer := bytes.Clone(good)
	newer[len(Magic)+1] = byte(Version + 1)
	flipped := bytes.Clone(good)
	flipped[len(good)/2] ^= 0x01
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"not a snapshot", []byte("VALUE a 0 1\r\nx\r\nEND\r\n"), ErrNotSnapshot},
		{"newer format", newer, ErrNewerFormat},
		{"truncated in the records", good[:len(good)-30], ErrTruncated},
		{"truncated before the checksum", good[:len(good)-4], ErrTruncated},
		{"a flipped bit", flipped, ErrChecksum},
		{"trailing garbage", append(bytes.Clone(good), 'x'), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Verify(bytes.NewReader(tc.b), nil)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// TestEveryDamageIsAnError flips every bit of every byte and cuts the file
// at every length: each is an error, never a panic, never a success.
func TestEveryDamageIsAnError(t *testing.T) {
	h, recs := sample()
	good := encode(t, h, recs)
	for i := range good {
		for bit := range 8 {
			b := bytes.Clone(good)
			b[i] ^= 1 << bit
			_, _, err := Verify(bytes.NewReader(b), nil)
			require.Error(t, err, "bit %d of byte %d flipped", bit, i)
		}
	}
	for n := range len(good) {
		_, _, err := Verify(bytes.NewReader(good[:n]), nil)
		require.Error(t, err, "cut at %d of %d bytes", n, len(good))
		require.True(t, errors.Is(err, ErrTruncated) || errors.Is(err, ErrCorrupt), "cut at %d: %v", n, err)
	}
}

// A reader's error stops Verify and is returned as it is.
func TestVerifyStopsOnCallerError(t *testing.T) {
	h, recs := sample()
	stop := fmt.Errorf("stop")
	_, _, err := Verify(bytes.NewReader(encode(t, h, recs)), func(Record) error { return stop })
	require.ErrorIs(t, err, stop)
}
