package robustness

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// mcClient is what a workload client asks of a memcache connection,
// whichever protocol it speaks; replies come back in the text protocol's
// words, which the model knows.
type mcClient interface {
	get(key string, withCAS bool) (item, error)
	store(verb, key, value string, token uint64) (string, error)
	delete(key string) (string, error)
	arith(verb, key string, delta uint64) (string, error)
	Close() error
}

// binConn is one memcache binary-protocol connection: the same operations
// as mcConn, so that the model checks binary clients' histories alike.
// Requests are never pipelined; after any error the caller closes it.
type binConn struct {
	c  net.Conn
	r  *bufio.Reader
	to time.Duration
}

// dialBinary connects to addr; with sec (a secured run) over TLS, logged
// in with SASL PLAIN before it is returned.
func dialBinary(addr string, timeout time.Duration, sec *Security) (*binConn, error) {
	if sec == nil {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, fmt.Errorf("%w: dial %s: %v", errNotSent, addr, err)
		}
		return &binConn{c: c, r: bufio.NewReader(c), to: timeout}, nil
	}
	c, err := sec.dial(addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", errNotSent, addr, err)
	}
	b := &binConn{c: c, r: bufio.NewReader(c), to: timeout}
	if err := sec.loginBinary(b); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%w: log in to %s: %v", errNotSent, addr, err)
	}
	return b, nil
}

func (b *binConn) Close() error { return b.c.Close() }

// Binary opcodes and statuses the workload meets (memcached's
// protocol_binary.h).
const (
	binOpGet     = 0x00
	binOpSet     = 0x01
	binOpAdd     = 0x02
	binOpReplace = 0x03
	binOpDelete  = 0x04
	binOpIncr    = 0x05
	binOpDecr    = 0x06

	binOK          = 0x0000
	binNotFound    = 0x0001
	binExists      = 0x0002
	binNotStored   = 0x0005
	binOutOfMemory = 0x0082
	binBusy        = 0x0085
	binTempFailure = 0x0086
	binInternal    = 0x0084
)

// binReply is one response: status, CAS, extras and value.
type binReply struct {
	status uint16
	cas    uint64
	extras []byte
	value  []byte
}

// roundTrip sends one request and reads its response, which must answer
// the same opcode.
func (b *binConn) roundTrip(op byte, key string, extras []byte, value string, cas uint64) (binReply, error) {
	if n := b.r.Buffered(); n > 0 {
		return binReply{}, fmt.Errorf("%w: %d unsolicited bytes before the request", errProtocol, n)
	}
	if err := b.c.SetDeadline(time.Now().Add(b.to)); err != nil {
		return binReply{}, fmt.Errorf("set deadline: %w", err)
	}
	req := make([]byte, 24, 24+len(extras)+len(key)+len(value))
	req[0], req[1] = 0x80, op
	binary.BigEndian.PutUint16(req[2:], uint16(len(key)))
	req[4] = byte(len(extras))
	binary.BigEndian.PutUint32(req[8:], uint32(len(extras)+len(key)+len(value)))
	binary.BigEndian.PutUint64(req[16:], cas)
	req = append(append(append(req, extras...), key...), value...)
	if _, err := b.c.Write(req); err != nil {
		return binReply{}, fmt.Errorf("write request: %w", err)
	}
	var hdr [24]byte
	if _, err := io.ReadFull(b.r, hdr[:]); err != nil {
		return binReply{}, fmt.Errorf("read reply: %w", err)
	}
	body := binary.BigEndian.Uint32(hdr[8:])
	extLen, keyLen := int(hdr[4]), int(binary.BigEndian.Uint16(hdr[2:]))
	if hdr[0] != 0x81 || hdr[1] != op || body > 2<<20 || extLen+keyLen > int(body) {
		return binReply{}, fmt.Errorf("%w: response header %x to opcode %#x", errProtocol, hdr, op)
	}
	data := make([]byte, body)
	if _, err := io.ReadFull(b.r, data); err != nil {
		return binReply{}, fmt.Errorf("read reply body: %w", err)
	}
	rp := binReply{status: binary.BigEndian.Uint16(hdr[6:]), cas: binary.BigEndian.Uint64(hdr[16:]),
		extras: data[:extLen], value: data[extLen+keyLen:]}
	switch rp.status {
	case binOutOfMemory, binBusy, binTempFailure, binInternal:
		// As a SERVER_ERROR: for a write, the outcome is unknown.
		return binReply{}, fmt.Errorf("%w: status %#x %q", errServer, rp.status, rp.value)
	}
	return rp, nil
}

func (b *binConn) get(key string, withCAS bool) (item, error) {
	rp, err := b.roundTrip(binOpGet, key, nil, "", 0)
	if err != nil {
		return item{}, err
	}
	switch rp.status {
	case binNotFound:
		return item{}, nil
	case binOK:
		// The workload stores every item with flags 0.
		if len(rp.extras) != 4 || binary.BigEndian.Uint32(rp.extras) != 0 {
			return item{}, fmt.Errorf("%w: get of %q: extras %x", errProtocol, key, rp.extras)
		}
		it := item{Found: true, Value: string(rp.value)}
		if withCAS {
			it.CAS = rp.cas
		}
		return it, nil
	}
	return item{}, fmt.Errorf("%w: get of %q: status %#x", errProtocol, key, rp.status)
}

// store answers in the text protocol's words: the binary protocol says
// "exists" for an add that found the key and "not found" for a replace
// that did not, where text says NOT_STORED for both.
func (b *binConn) store(verb, key, value string, token uint64) (string, error) {
	op := map[string]byte{"set": binOpSet, "add": binOpAdd, "replace": binOpReplace, "cas": binOpSet}[verb]
	if verb != "cas" {
		token = 0
	}
	rp, err := b.roundTrip(op, key, make([]byte, 8), value, token)
	if err != nil {
		return "", err
	}
	switch {
	case rp.status == binOK:
		return "STORED", nil
	case verb == "add" && rp.status == binExists, verb == "replace" && rp.status == binNotFound,
		rp.status == binNotStored:
		return "NOT_STORED", nil
	case verb == "cas" && rp.status == binExists:
		return "EXISTS", nil
	case verb == "cas" && rp.status == binNotFound:
		return "NOT_FOUND", nil
	}
	return "", fmt.Errorf("%w: %s reply status %#x", errProtocol, verb, rp.status)
}

func (b *binConn) delete(key string) (string, error) {
	rp, err := b.roundTrip(binOpDelete, key, nil, "", 0)
	if err != nil {
		return "", err
	}
	switch rp.status {
	case binOK:
		return "DELETED", nil
	case binNotFound:
		return "NOT_FOUND", nil
	}
	return "", fmt.Errorf("%w: delete reply status %#x", errProtocol, rp.status)
}

// arith runs incr or decr without creating a missing counter (expiration
// 0xffffffff), as the text protocol's do.
func (b *binConn) arith(verb, key string, delta uint64) (string, error) {
	op := byte(binOpIncr)
	if verb == "decr" {
		op = binOpDecr
	}
	extras := binary.BigEndian.AppendUint64(nil, delta)
	extras = binary.BigEndian.AppendUint64(extras, 0)
	extras = binary.BigEndian.AppendUint32(extras, 0xffffffff)
	rp, err := b.roundTrip(op, key, extras, "", 0)
	if err != nil {
		return "", err
	}
	switch {
	case rp.status == binNotFound:
		return "NOT_FOUND", nil
	case rp.status == binOK && len(rp.value) == 8:
		return strconv.FormatUint(binary.BigEndian.Uint64(rp.value), 10), nil
	}
	return "", fmt.Errorf("%w: %s reply status %#x value %x", errProtocol, verb, rp.status, rp.value)
}
