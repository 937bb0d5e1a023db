package migrate

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sampleRecords() []ExportRecord {
	return []ExportRecord{
		{Key: []byte("plain"), Flags: 7, Exptime: 0, Value: []byte("hello")},
		{Key: []byte("ünï code/:+%"), Flags: 0xffffffff, Exptime: 1795878786, Value: []byte{}},
		{Key: []byte{0, 1, 0xff, ' '}, Flags: 1, Exptime: 1, Value: []byte{0, '\r', '\n', 0xff}},
	}
}

func encodeExport(t testing.TB, recs []ExportRecord) []byte {
	var buf bytes.Buffer
	w, err := NewExportWriter(&buf, ExportHeader{Member: "n1", Applied: 12})
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.Add(r))
	}
	n, err := w.Close()
	require.NoError(t, err)
	require.Equal(t, uint64(len(recs)), n)
	return buf.Bytes()
}

func readExport(b []byte) (ExportHeader, []ExportRecord, error) {
	r, err := NewExportReader(bytes.NewReader(b))
	if err != nil {
		return ExportHeader{}, nil, err
	}
	var out []ExportRecord
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r.Header(), out, nil
		}
		if err != nil {
			return r.Header(), out, err
		}
		out = append(out, rec)
	}
}

func TestExportFormatRoundTrips(t *testing.T) {
	b := encodeExport(t, sampleRecords())
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	require.Len(t, lines, 5, "a header, three items, a trailer")
	require.Equal(t, `{"format":"kvd-export","version":1,"member":"n1","applied_index":12}`, lines[0])
	require.Equal(t, `{"key":"plain","flags":7,"exptime":0,"value_b64":"aGVsbG8="}`, lines[1])
	require.Equal(t, `{"key_b64":"AAH/IA==","flags":1,"exptime":1,"value_b64":"AA0K/w=="}`, lines[3], "a key that is not plain text goes as base64")
	require.Equal(t, `{"end":true,"items":3}`, lines[4])
	h, got, err := readExport(b)
	require.NoError(t, err)
	require.Equal(t, "n1", h.Member)
	require.Equal(t, sampleRecords(), got)
}

func TestExportReaderRefusesDamage(t *testing.T) {
	good := string(encodeExport(t, sampleRecords()))
	header := `{"format":"kvd-export","version":1}` + "\n"
	for _, tc := range []struct{ name, file, want string }{
		{"empty", "", "cut short at line 1"},
		{"not an export", "hello\n", "not a kvd-export header"},
		{"newer version", `{"format":"kvd-export","version":2}` + "\n", "version 2"},
		{"no trailer", strings.Join(strings.SplitAfter(good, "\n")[:4], ""), "cut short at line 5"},
		{"cut mid-line", good[:len(good)-5], "cut short"},
		{"trailer miscounts", header + `{"end":true,"items":1}` + "\n", "counts 1 items"},
		{"trailer without count", header + `{"end":true}` + "\n", "counts no items"},
		{"data after the trailer", good + "\n", "after the trailer"},
		{"both keys", header + `{"key":"a","key_b64":"YQ==","value_b64":""}` + "\n", "exactly one"},
		{"no key", header + `{"value_b64":""}` + "\n", "exactly one"},
		{"no value", header + `{"key":"a"}` + "\n", "without value_b64"},
		{"bad base64", header + `{"key":"a","value_b64":"!!"}` + "\n", "value_b64"},
		{"long key", header + `{"key":"` + string(make251()) + `","value_b64":""}` + "\n", "251 bytes"},
		{"negative exptime", header + `{"key":"a","exptime":-1,"value_b64":""}` + "\n", "negative exptime"},
		{"flags overflow", header + `{"key":"a","flags":4294967296,"value_b64":""}` + "\n", "line 2"},
		{"not json", header + "key=a\n", "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readExport([]byte(tc.file))
			require.ErrorIs(t, err, ErrExportFormat)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A line is bounded before it is decoded: one longer than the bound is
// refused when the bound is passed, not after it is all held.
func TestExportReaderBoundsLines(t *testing.T) {
	r, err := NewExportReader(strings.NewReader(`{"format":"kvd-export","version":1}` + "\n" + strings.Repeat("x", 2000) + "\n"))
	require.NoError(t, err)
	r.maxLen = 1000
	_, err = r.Next()
	require.ErrorIs(t, err, ErrExportFormat)
	require.ErrorContains(t, err, "longer than 1000 bytes")
}

// Every cut of a file short of its end is an error, never a shorter
// import.
func TestExportReaderRefusesEveryTruncation(t *testing.T) {
	good := encodeExport(t, sampleRecords())
	for n := range len(good) {
		_, _, err := readExport(good[:n])
		require.Error(t, err, "cut at %d of %d", n, len(good))
	}
}

// FuzzExportReader: no input panics, and a file the reader accepts
// re-encodes to a file that reads back to the same items.
func FuzzExportReader(f *testing.F) {
	f.Add(encodeExport(f, sampleRecords()))
	f.Add(encodeExport(f, nil))
	f.Add([]byte(`{"format":"kvd-export","version":1}` + "\n" + `{"key_b64":"YQ==","value_b64":""}` + "\n" + `{"end":true,"items":1}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, recs, err := readExport(b)
		if err != nil {
			return
		}
		_, again, err := readExport(encodeExport(t, recs))
		require.NoError(t, err)
		require.Equal(t, recs, again)
	})
}

func TestExptimeFor(t *testing.T) {
	now := time.Unix(1_800_000_000, 500_000_000)
	for _, tc := range []struct {
		name    string
		expires time.Time
		want    int64
		live    bool
	}{
		{"never", time.Time{}, 0, true},
		{"already past", now.Add(-time.Second), 0, false},
		{"less than a second left", now.Add(900 * time.Millisecond), 0, false},
		{"seconds left, rounded down", now.Add(5500 * time.Millisecond), 5, true},
		{"thirty days is still relative", now.Add(thirtyDays * time.Second), thirtyDays, true},
		{"past thirty days goes absolute", now.Add((thirtyDays + 10) * time.Second), now.Unix() + thirtyDays + 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, live := exptimeFor(tc.expires, now)
			require.Equal(t, tc.live, live)
			require.Equal(t, tc.want, got)
		})
	}
}
