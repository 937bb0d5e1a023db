// Package chunkread is a test helper for the codecs' fuzz targets: a
// reader that hands its input out in chunks of fuzzer-chosen sizes, so that
// a decoder is checked to read the same however the bytes arrive.
package chunkread

import "io"

// Reader returns Data in chunks whose sizes cycle through Sizes, each
// taken modulo Max and plus one (one byte at a time when Sizes is empty).
type Reader struct {
	Data  []byte
	Sizes []byte
	Max   int
	i     int
}

func (c *Reader) Read(p []byte) (int, error) {
	if len(c.Data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.Sizes) > 0 && c.Max > 0 {
		n = int(c.Sizes[c.i%len(c.Sizes)])%c.Max + 1
		c.i++
	}
	n = min(n, len(p), len(c.Data))
	copy(p, c.Data[:n])
	c.Data = c.Data[n:]
	return n, nil
}
