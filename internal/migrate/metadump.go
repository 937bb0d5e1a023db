package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strconv"
)

// DumpEntry is one line of memcached's `lru_crawler metadump`: an item's
// key and what the crawler saw of it.
type DumpEntry struct {
	Key []byte
	// Exp is the item's absolute expiry in Unix seconds; -1: never.
	Exp int64
	// Size is memcached's size of the whole item (header, key, value), in
	// bytes: an upper bound of the value's, used to size batches.
	Size int
}

// errDumpLine is a metadump line this parser does not understand.
var errDumpLine = errors.New("malformed metadump line")

// ParseDumpLine parses one metadump line (without its line terminator):
//
//	key=<urlencoded key> exp=<unix seconds or -1> la=… cas=… fetch=… cls=… size=…
//
// Fields it does not know are skipped, as memcached adds fields over
// versions; key, exp and size are required. The key is checked against
// memcached's 250-byte bound after decoding. memcached escapes every byte
// but letters, digits and "-._~" as %XX, so '+' is not a space here.
func ParseDumpLine(line []byte) (DumpEntry, error) {
	var e DumpEntry
	var haveKey, haveExp, haveSize bool
	for len(line) > 0 {
		var field []byte
		field, line, _ = bytes.Cut(line, []byte{' '})
		if len(field) == 0 {
			continue
		}
		name, val, ok := bytes.Cut(field, []byte{'='})
		if !ok {
			return DumpEntry{}, fmt.Errorf("%w: field %q has no '='", errDumpLine, truncate(field))
		}
		switch string(name) {
		case "key":
			if len(val) > 3*maxKeyLen {
				return DumpEntry{}, fmt.Errorf("%w: key longer than %d bytes", errDumpLine, maxKeyLen)
			}
			k, err := url.PathUnescape(string(val))
			if err != nil {
				return DumpEntry{}, fmt.Errorf("%w: key %q: %v", errDumpLine, truncate(val), err)
			}
			if len(k) == 0 || len(k) > maxKeyLen {
				return DumpEntry{}, fmt.Errorf("%w: key of %d bytes (1..%d)", errDumpLine, len(k), maxKeyLen)
			}
			e.Key, haveKey = []byte(k), true
		case "exp":
			n, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil || n < -1 {
				return DumpEntry{}, fmt.Errorf("%w: exp %q", errDumpLine, truncate(val))
			}
			e.Exp, haveExp = n, true
		case "size":
			n, err := strconv.ParseUint(string(val), 10, 31)
			if err != nil {
				return DumpEntry{}, fmt.Errorf("%w: size %q", errDumpLine, truncate(val))
			}
			e.Size, haveSize = int(n), true
		}
	}
	if !haveKey || !haveExp || !haveSize {
		return DumpEntry{}, fmt.Errorf("%w: key, exp and size are required", errDumpLine)
	}
	return e, nil
}

// formatDumpLine is ParseDumpLine's inverse for the fields it keeps; the
// tests and the fuzz target use it.
func formatDumpLine(e DumpEntry) string {
	return fmt.Sprintf("key=%s exp=%d la=0 cas=1 fetch=no cls=1 size=%d", url.PathEscape(string(e.Key)), e.Exp, e.Size)
}

// truncate bounds what an error quotes of untrusted input.
func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
