package snapfile

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzRead feeds the reader arbitrary bytes: it must never panic, and a
// file it accepts must re-encode to exactly the bytes it read.
func FuzzRead(f *testing.F) {
	h, recs := sample()
	f.Add(encode(f, h, recs))
	f.Add(encode(f, h, nil))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		var again bytes.Buffer
		w, err := NewWriter(&again, r.Header())
		if err != nil {
			t.Fatalf("header read but not written back: %v", err)
		}
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return
			}
			if err := w.Add(rec); err != nil {
				t.Fatalf("record read but not written back: %v", err)
			}
		}
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), b) {
			t.Fatalf("accepted a file that does not re-encode to itself")
		}
	})
}
