package migrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// maxKeyLen is memcached's (and kvd's) key bound, in bytes.
const maxKeyLen = 250

// MaxValueLen bounds a value read from either end or from a file: kvd's
// --max-item-size is at most 128 MiB.
const MaxValueLen = 128 << 20

// Dialer opens a connection to addr. The default is a plain TCP dial; TLS
// or an authenticating handshake wraps it.
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

func defaultDial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// metaConn is one connection speaking memcached's meta protocol, used
// pipelined: a batch of requests is written, then their answers are read
// in order. Not safe for concurrent use; each worker owns its own.
type metaConn struct {
	c       net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	name    string // "source memcached 10.0.0.1:11211", for errors
	timeout time.Duration
}

func dialMeta(ctx context.Context, dial Dialer, addr, name string, timeout time.Duration) (*metaConn, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &metaConn{c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10), name: name, timeout: timeout}, nil
}

func (m *metaConn) Close() error { return m.c.Close() }

// begin bounds the next round trip: a peer that stops answering is an
// error, not a hang.
func (m *metaConn) begin() {
	if m.timeout > 0 {
		_ = m.c.SetDeadline(time.Now().Add(m.timeout))
	}
}

// wrap names the peer in a connection error.
func (m *metaConn) wrap(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%s: %w", m.name, err)
}

// textKey reports whether key can go on a text command line as it is;
// other keys go base64-encoded with the meta 'b' flag.
func textKey(key []byte) bool {
	if len(key) == 0 || len(key) > maxKeyLen {
		return false
	}
	for _, c := range key {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// writeKey writes " <key>" and returns the flag that must follow it ("" or
// " b").
func (m *metaConn) writeKey(key []byte) string {
	m.w.WriteByte(' ')
	if textKey(key) {
		m.w.Write(key)
		return ""
	}
	enc := base64.StdEncoding
	buf := make([]byte, enc.EncodedLen(len(key)))
	enc.Encode(buf, key)
	m.w.Write(buf)
	return " b"
}

// writeGet queues `mg <key> [b] v f [t]`.
func (m *metaConn) writeGet(key []byte, withTTL bool) {
	m.w.WriteString("mg")
	m.w.WriteString(m.writeKey(key))
	if withTTL {
		m.w.WriteString(" v f t\r\n")
	} else {
		m.w.WriteString(" v f\r\n")
	}
}

// writeSet queues a set of key: the classic `set`, which every kvd
// applies whatever its cluster version, or `ms <base64 key> <len> b F T`
// for a key the text protocol cannot carry. exptime is memcached's: 0
// never, up to 30 days relative, else absolute. Success is STORED or HD.
func (m *metaConn) writeSet(key []byte, value []byte, flags uint32, exptime int64) {
	if textKey(key) {
		m.w.WriteString("set ")
		m.w.Write(key)
		fmt.Fprintf(m.w, " %d %d %d\r\n", flags, exptime, len(value))
	} else {
		m.w.WriteString("ms")
		b := m.writeKey(key)
		fmt.Fprintf(m.w, " %d%s F%d T%d\r\n", len(value), b, flags, exptime)
	}
	m.w.Write(value)
	m.w.WriteString("\r\n")
}

func (m *metaConn) flush() error {
	m.begin()
	if err := m.w.Flush(); err != nil {
		return m.wrap(err)
	}
	return nil
}

// reply is one meta answer.
type reply struct {
	// code is "VA", "HD", "EN", "NS", "EX", "NF" or "STORED"; empty for an error
	// answer, whose text is in errText.
	code    string
	errText string
	value   []byte
	flags   uint32
	ttl     int64 // the t flag: seconds remaining, -1 never
	hasTTL  bool
}

// errProtocol is an answer this client cannot parse: the stream can no
// longer be trusted.
var errProtocol = errors.New("unexpected answer")

// readReply reads one answer. An error answer (CLIENT_ERROR, SERVER_ERROR,
// ERROR) is a reply, not an error: it concerns one request. An error
// return means the connection is unusable.
func (m *metaConn) readReply() (reply, error) {
	line, err := m.readLine()
	if err != nil {
		return reply{}, err
	}
	for _, p := range []string{"CLIENT_ERROR", "SERVER_ERROR", "ERROR"} {
		if bytes.HasPrefix(line, []byte(p)) {
			return reply{errText: string(truncate(line))}, nil
		}
	}
	fields := bytes.Fields(line)
	if len(fields) == 0 {
		return reply{}, m.wrap(fmt.Errorf("%w: an empty line", errProtocol))
	}
	rp := reply{code: string(fields[0])}
	rest := fields[1:]
	size := -1
	if rp.code == "VA" {
		if len(rest) == 0 {
			return reply{}, m.wrap(fmt.Errorf("%w: %q", errProtocol, truncate(line)))
		}
		n, err := strconv.ParseUint(string(rest[0]), 10, 31)
		if err != nil || n > MaxValueLen {
			return reply{}, m.wrap(fmt.Errorf("%w: value length in %q (at most %d)", errProtocol, truncate(line), MaxValueLen))
		}
		size, rest = int(n), rest[1:]
	}
	for _, f := range rest {
		switch f[0] {
		case 'f':
			n, err := strconv.ParseUint(string(f[1:]), 10, 32)
			if err != nil {
				return reply{}, m.wrap(fmt.Errorf("%w: flags in %q", errProtocol, truncate(line)))
			}
			rp.flags = uint32(n)
		case 't':
			n, err := strconv.ParseInt(string(f[1:]), 10, 64)
			if err != nil {
				return reply{}, m.wrap(fmt.Errorf("%w: ttl in %q", errProtocol, truncate(line)))
			}
			rp.ttl, rp.hasTTL = n, true
		}
	}
	if size >= 0 {
		// The length is bounded above; the buffer still grows only as the
		// bytes arrive, so a lying peer costs what it sends.
		var buf bytes.Buffer
		if size <= 1<<20 {
			buf.Grow(size + 2)
		}
		if _, err := io.CopyN(&buf, m.r, int64(size)+2); err != nil {
			return reply{}, m.wrap(err)
		}
		b := buf.Bytes()
		if !bytes.HasSuffix(b, []byte("\r\n")) {
			return reply{}, m.wrap(fmt.Errorf("%w: a value not ended by \\r\\n", errProtocol))
		}
		rp.value = b[:size]
	}
	return rp, nil
}

// maxLine bounds an answer's first line.
const maxLine = 8 << 10

func (m *metaConn) readLine() ([]byte, error) {
	line, err := m.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > maxLine {
		return nil, m.wrap(fmt.Errorf("%w: a line longer than %d bytes", errProtocol, maxLine))
	}
	if err != nil {
		return nil, m.wrap(err)
	}
	return bytes.TrimRight(line, "\r\n"), nil
}
