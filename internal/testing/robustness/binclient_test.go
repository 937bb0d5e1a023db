package robustness

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// fakeBinary answers the first request on a connection with one response
// of the request's opcode (or of opcode, when it is not 0xff), status,
// extras and value.
func fakeBinary(t *testing.T, opcode byte, status uint16, extras, value []byte) string {
	return serveLoopback(t, func(c net.Conn) {
		var hdr [24]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[8:]))); err != nil {
			return
		}
		if opcode == 0xff {
			opcode = hdr[1]
		}
		rsp := make([]byte, 24)
		rsp[0], rsp[1], rsp[4] = 0x81, opcode, byte(len(extras))
		binary.BigEndian.PutUint16(rsp[6:], status)
		binary.BigEndian.PutUint32(rsp[8:], uint32(len(extras)+len(value)))
		binary.BigEndian.PutUint64(rsp[16:], 77)
		rsp = append(append(rsp, extras...), value...)
		_, _ = c.Write(rsp)
		time.Sleep(100 * time.Millisecond)
	})
}

// TestBinaryClientSpeaksTheModelsWords: a binary client's replies reach
// the model in the text protocol's words, failures of the server are
// unknown outcomes, and a response no memcached would send fails the run.
func TestBinaryClientSpeaksTheModelsWords(t *testing.T) {
	flags0 := []byte{0, 0, 0, 0}
	tests := []struct {
		name    string
		opcode  byte // 0xff: the request's
		status  uint16
		extras  []byte
		value   string
		do      func(*binConn) (string, error)
		want    string
		wantErr error
	}{
		{"get hit", 0xff, binOK, flags0, "v", func(b *binConn) (string, error) {
			it, err := b.get("k", true)
			if it.CAS != 77 {
				return "", errors.New("cas not read")
			}
			return it.Value, err
		}, "v", nil},
		{"get miss", 0xff, binNotFound, nil, "Not found", func(b *binConn) (string, error) {
			it, err := b.get("k", false)
			if it.Found {
				return "found", err
			}
			return "END", err
		}, "END", nil},
		{"get with flags never written", 0xff, binOK, []byte{0, 0, 0, 7}, "v", func(b *binConn) (string, error) {
			_, err := b.get("k", false)
			return "", err
		}, "", errProtocol},
		{"add of an existing key", 0xff, binExists, nil, "Data exists for key.", func(b *binConn) (string, error) {
			return b.store("add", "k", "v", 0)
		}, "NOT_STORED", nil},
		{"replace of a missing key", 0xff, binNotFound, nil, "Not found", func(b *binConn) (string, error) {
			return b.store("replace", "k", "v", 0)
		}, "NOT_STORED", nil},
		{"cas stale", 0xff, binExists, nil, "Data exists for key.", func(b *binConn) (string, error) {
			return b.store("cas", "k", "v", 5)
		}, "EXISTS", nil},
		{"cas missing", 0xff, binNotFound, nil, "Not found", func(b *binConn) (string, error) {
			return b.store("cas", "k", "v", 5)
		}, "NOT_FOUND", nil},
		{"set stored", 0xff, binOK, nil, "", func(b *binConn) (string, error) {
			return b.store("set", "k", "v", 0)
		}, "STORED", nil},
		{"delete miss", 0xff, binNotFound, nil, "Not found", func(b *binConn) (string, error) {
			return b.delete("k")
		}, "NOT_FOUND", nil},
		{"incr", 0xff, binOK, nil, "\x00\x00\x00\x00\x00\x00\x00\x2a", func(b *binConn) (string, error) {
			return b.arith("incr", "k", 1)
		}, "42", nil},
		{"temporary failure on a write", 0xff, binTempFailure, nil, "timeout", func(b *binConn) (string, error) {
			return b.store("set", "k", "v", 0)
		}, "", errServer},
		{"response to another opcode", binOpGet, binOK, nil, "", func(b *binConn) (string, error) {
			return b.store("set", "k", "v", 0)
		}, "", errProtocol},
		{"a set answered not found", 0xff, binNotFound, nil, "", func(b *binConn) (string, error) {
			return b.store("set", "k", "v", 0)
		}, "", errProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := fakeBinary(t, tt.opcode, tt.status, tt.extras, []byte(tt.value))
			b, err := dialBinary(addr, 2*time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			got, err := tt.do(b)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
