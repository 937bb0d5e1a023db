package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Wire constants. The format is described in the package documentation.
const (
	// ProtocolVersion is the only version this build speaks. A receiver
	// refuses any other with statusBadVersion.
	ProtocolVersion = 1

	// MaxFrameSize bounds the body of one frame. The reader checks the
	// declared length against it before allocating anything; the writer
	// never produces a larger frame and drops a message that cannot fit.
	MaxFrameSize = 64 << 20

	helloSize    = 32 // magic 4 + version 2 + flags 2 + cluster 8 + from 8 + to 8
	responseSize = 24 // magic 4 + version 2 + status 2 + cluster 8 + id 8
	frameHdrSize = 4
)

// magic opens every handshake in both directions: "kvdP" (kvd peer).
var magic = [4]byte{'k', 'v', 'd', 'P'}

// handshake status codes, sent by the receiver in its response.
const (
	statusOK           uint16 = 0
	statusBadVersion   uint16 = 1
	statusClusterID    uint16 = 2 // cluster IDs differ
	statusWrongNode    uint16 = 3 // the dialer addressed another node ID
	statusBadSender    uint16 = 4 // sender ID is 0 or the receiver's own ID
	statusBadHandshake uint16 = 5 // reserved flags set
	// statusNotMember: the receiver leads the cluster and the sender is not
	// in the configuration it has applied; the response is followed by the
	// receiver's applied index (uint64), from which the sender can tell
	// whether it was removed or is a joiner the leader has not applied yet.
	statusNotMember uint16 = 6
	// statusWrongCert: with peer TLS, the sender's certificate does not
	// name the member its hello claims to be (never sent without TLS).
	statusWrongCert uint16 = 7
)

func statusText(s uint16) string {
	switch s {
	case statusOK:
		return "ok"
	case statusBadVersion:
		return "unsupported protocol version"
	case statusClusterID:
		return "cluster ID mismatch"
	case statusWrongNode:
		return "wrong node: the address belongs to another member"
	case statusBadSender:
		return "invalid sender ID"
	case statusBadHandshake:
		return "malformed handshake"
	case statusNotMember:
		return "not a member of the cluster"
	case statusWrongCert:
		return "our certificate does not name the member our handshake claims"
	}
	return fmt.Sprintf("unknown status %d", s)
}

// errProtocol marks a peer that broke the wire format; its connection is
// closed. Everything a reader rejects wraps it.
var errProtocol = errors.New("transport: peer protocol violation")

// errNotMember marks a handshake refused because the sender is not a member.
var errNotMember = errors.New("transport: not a member of the cluster")

// errUnvouched is a not-member refusal of a sender whose peer certificate
// does not vouch for it as a member (tlsconf.Vouched): with peer TLS on,
// that is a certificate of the peer CA used for what it was not issued
// for, worth a warning, where a removed member redialling is not.
var errUnvouched = errors.New("its certificate is not marked as that member's (URI kvd-member:NAME)")

// hello is the dialer's half of the handshake.
type hello struct {
	Version   uint16
	Flags     uint16
	ClusterID uint64
	From, To  uint64
}

func (h hello) marshal() []byte {
	b := make([]byte, helloSize)
	copy(b, magic[:])
	binary.BigEndian.PutUint16(b[4:], h.Version)
	binary.BigEndian.PutUint16(b[6:], h.Flags)
	binary.BigEndian.PutUint64(b[8:], h.ClusterID)
	binary.BigEndian.PutUint64(b[16:], h.From)
	binary.BigEndian.PutUint64(b[24:], h.To)
	return b
}

// readHello reads exactly helloSize bytes; a wrong magic is a protocol error
// (the other side is not a kvd peer) and gets no response.
func readHello(r io.Reader) (hello, error) {
	var b [helloSize]byte
	// The magic first, so that a stray client is turned away at once.
	if _, err := io.ReadFull(r, b[:4]); err != nil {
		return hello{}, err
	}
	if [4]byte(b[:4]) != magic {
		return hello{}, fmt.Errorf("%w: bad handshake magic %q", errProtocol, b[:4])
	}
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return hello{}, err
	}
	return hello{
		Version:   binary.BigEndian.Uint16(b[4:]),
		Flags:     binary.BigEndian.Uint16(b[6:]),
		ClusterID: binary.BigEndian.Uint64(b[8:]),
		From:      binary.BigEndian.Uint64(b[16:]),
		To:        binary.BigEndian.Uint64(b[24:]),
	}, nil
}

// response is the receiver's half of the handshake: its verdict, and its own
// version, cluster and ID so that a refused dialer can log why.
type response struct {
	Version   uint16
	Status    uint16
	ClusterID uint64
	ID        uint64
	// Applied follows a statusNotMember response: the index as of which
	// the receiver's configuration leaves the sender out.
	Applied uint64
}

func (r response) marshal() []byte {
	b := make([]byte, responseSize, responseSize+8)
	copy(b, magic[:])
	binary.BigEndian.PutUint16(b[4:], r.Version)
	binary.BigEndian.PutUint16(b[6:], r.Status)
	binary.BigEndian.PutUint64(b[8:], r.ClusterID)
	binary.BigEndian.PutUint64(b[16:], r.ID)
	if r.Status == statusNotMember {
		b = binary.BigEndian.AppendUint64(b, r.Applied)
	}
	return b
}

func readResponse(rd io.Reader) (response, error) {
	var b [responseSize]byte
	if _, err := io.ReadFull(rd, b[:]); err != nil {
		return response{}, err
	}
	if [4]byte(b[:4]) != magic {
		return response{}, fmt.Errorf("%w: bad handshake response magic %q", errProtocol, b[:4])
	}
	r := response{
		Version:   binary.BigEndian.Uint16(b[4:]),
		Status:    binary.BigEndian.Uint16(b[6:]),
		ClusterID: binary.BigEndian.Uint64(b[8:]),
		ID:        binary.BigEndian.Uint64(b[16:]),
	}
	if r.Status == statusNotMember {
		if _, err := io.ReadFull(rd, b[:8]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return response{}, fmt.Errorf("reading the refusal's applied index: %w", err)
		}
		r.Applied = binary.BigEndian.Uint64(b[:8])
	}
	return r, nil
}

// check is the receiver's verdict on a hello: the status to answer with.
func (h hello) check(clusterID, local uint64) uint16 {
	switch {
	case h.Version != ProtocolVersion:
		return statusBadVersion
	case h.Flags != 0:
		return statusBadHandshake
	case h.ClusterID != clusterID:
		return statusClusterID
	case h.To != local:
		return statusWrongNode
	case h.From == 0 || h.From == local:
		return statusBadSender
	}
	return statusOK
}

// frameEncoder appends messages to a buffer as frames. Messages are packed
// into the open frame until it would exceed target bytes; then a new frame
// starts. A message that cannot fit in MaxFrameSize on its own is refused.
type frameEncoder struct {
	buf    []byte
	start  int // offset of the open frame's header, or -1
	target int
}

func (e *frameEncoder) reset(target int) {
	e.buf = e.buf[:0]
	e.start = -1
	e.target = target
}

// errTooLarge is returned by add for a message over MaxFrameSize.
var errTooLarge = errors.New("transport: message larger than the maximum frame size")

func (e *frameEncoder) add(m *pb.Message) error {
	size := proto.Size(m)
	need := binary.MaxVarintLen64 + size
	if need > MaxFrameSize {
		return fmt.Errorf("%w (%d bytes)", errTooLarge, size)
	}
	if e.start >= 0 && len(e.buf)-e.start-frameHdrSize+need > e.target {
		e.close()
	}
	if e.start < 0 {
		e.start = len(e.buf)
		e.buf = append(e.buf, 0, 0, 0, 0)
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(size))
	before := len(e.buf)
	var err error
	e.buf, err = proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(e.buf, m)
	if err != nil {
		return fmt.Errorf("marshal %s: %w", m.GetType(), err)
	}
	if got := len(e.buf) - before; got != size {
		return fmt.Errorf("marshal %s: size changed from %d to %d (message mutated while queued?)", m.GetType(), size, got)
	}
	return nil
}

// close finishes the open frame, if any, by writing its length.
func (e *frameEncoder) close() {
	if e.start < 0 {
		return
	}
	binary.BigEndian.PutUint32(e.buf[e.start:], uint32(len(e.buf)-e.start-frameHdrSize))
	e.start = -1
}

// bytes closes the open frame and returns everything encoded.
func (e *frameEncoder) bytes() []byte {
	e.close()
	return e.buf
}

// frameReadChunk is the first step by which readFrame grows a body buffer
// too small for a frame; each further step doubles what has arrived.
const frameReadChunk = 64 << 10

// readFrame reads one frame body into *buf (grown as needed, reused
// otherwise) and returns it. The declared length is checked before any
// allocation: 0 and anything over MaxFrameSize are protocol errors. A buffer
// too small for the body grows with the bytes that actually arrive, never by
// the declared length alone, so a peer that announces 64 MiB and sends a
// few bytes costs memory in proportion to what it sent, not to what it
// announced.
func readFrame(r io.Reader, buf *[]byte) ([]byte, error) {
	var hdr [frameHdrSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	declared := binary.BigEndian.Uint32(hdr[:])
	if declared == 0 || declared > MaxFrameSize {
		return nil, fmt.Errorf("%w: frame length %d outside 1..%d", errProtocol, declared, MaxFrameSize)
	}
	n := int(declared)
	body := (*buf)[:0]
	for len(body) < n {
		next := n
		if cap(body) < n {
			next = min(n, max(2*len(body), frameReadChunk))
			if cap(body) < next {
				// Exactly next: a buffer that reaches a whole frame
				// stays within retainBytes and is reused.
				grown := make([]byte, len(body), next)
				copy(grown, body)
				body = grown
				*buf = body
			}
		}
		k, err := io.ReadFull(r, body[len(body):next])
		body = body[:len(body)+k]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return body, nil
}

// decodeFrame calls fn for each message of a frame body, in order. It stops
// at the first malformed message or the first error of fn. The messages do
// not alias body, which may be reused afterwards.
func decodeFrame(body []byte, fn func(*pb.Message) error) error {
	if len(body) == 0 {
		return fmt.Errorf("%w: empty frame", errProtocol)
	}
	for len(body) > 0 {
		size, n := binary.Uvarint(body)
		if n <= 0 {
			return fmt.Errorf("%w: bad message length prefix", errProtocol)
		}
		body = body[n:]
		if size > uint64(len(body)) {
			return fmt.Errorf("%w: message length %d exceeds the %d bytes left in the frame", errProtocol, size, len(body))
		}
		m := new(pb.Message)
		if err := proto.Unmarshal(body[:size], m); err != nil {
			return fmt.Errorf("%w: %v", errProtocol, err)
		}
		body = body[size:]
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}
