package bench

import (
	"hash/crc32"
	"math/rand/v2"
)

// Checksummed values let a reader verify a value without remembering what
// was written. A value of n ≥ checksumLen bytes is
//
//	crc (8 lowercase hex digits) | body (n-8 printable bytes)
//
// where crc is CRC-32C over key || body. Binding the key into the checksum
// catches a server returning another key's value. Values shorter than
// checksumLen carry no checksum (only allowed without --verify).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const hexDigits = "0123456789abcdef"

// bodySource is a block of printable pseudo-random bytes that value bodies
// are sliced from, so making a value costs a copy and a CRC, not a PRNG call
// per byte.
type bodySource struct {
	block []byte
}

const bodyBlockLen = 64 << 10

func newBodySource(rng *rand.Rand, maxLen int) *bodySource {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, bodyBlockLen+maxLen)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return &bodySource{block: b}
}

// makeValue writes a value of length n for key into dst (reusing its
// capacity) and returns it. off picks where the body starts in the block.
func (s *bodySource) makeValue(dst, key []byte, n int, off uint64) []byte {
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	if n < checksumLen {
		copy(dst, s.block[:n])
		return dst
	}
	start := int(off % bodyBlockLen)
	body := dst[checksumLen:]
	copy(body, s.block[start:start+len(body)])
	sum := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, body)
	for i := checksumLen - 1; i >= 0; i-- {
		dst[i] = hexDigits[sum&0xf]
		sum >>= 4
	}
	return dst
}

// checkValue reports whether v is a well-formed checksummed value for key.
func checkValue(key, v []byte) bool {
	if len(v) < checksumLen {
		return false
	}
	var want uint32
	for _, c := range v[:checksumLen] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return false
		}
		want = want<<4 | uint32(d)
	}
	return crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, v[checksumLen:]) == want
}
