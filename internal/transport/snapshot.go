package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/failpoint"
)

// SnapshotSource is the local state store as the snapshot sender sees it
// (fsm.FSM). The transport knows nothing of what the files hold.
type SnapshotSource interface {
	// Checkpoint writes a consistent copy of the state for member to into
	// dir, which does not exist yet, and returns an applied index the copy
	// covers at least. (What a member is sent may depend on what it keeps:
	// a witness is sent no items.)
	Checkpoint(dir string, to NodeID) (applied uint64, err error)
}

// Snapshot stream constants. The format is described in the package
// documentation.
const (
	// flagSnapshot in a hello's flags opens a snapshot stream instead of a
	// message connection.
	flagSnapshot uint16 = 1

	snapStreamVersion = 1
	snapTagFile       = 'F'
	snapTagEnd        = 'E'
	snapAckOK         = 0
	snapAckFailed     = 1

	// maxSnapFiles and maxSnapFileSize bound what a stream may declare; the
	// receiver never allocates by them (files are copied through a fixed
	// buffer) but refuses absurd values early.
	maxSnapFiles    = 1 << 16
	maxSnapFileSize = 1 << 40
	maxSnapNameLen  = 255
	// maxSnapMsgSize bounds the MsgSnap itself: it carries metadata only.
	maxSnapMsgSize = 1 << 20

	// snapCopyBuffer is the one buffer a transfer moves file bytes through.
	snapCopyBuffer = 256 << 10

	// snapIdleTimeout bounds how long one read or write of a stream may wait;
	// Config.SnapshotTimeout bounds the whole transfer.
	snapIdleTimeout = 30 * time.Second
	// snapAckTimeout bounds the wait for the receiver's verdict, which
	// follows its fsyncs and the hand-over to the replica.
	snapAckTimeout = 2 * time.Minute

	// staleIncomingAge is how old a received snapshot directory must be for
	// a later receive to delete it: the replica consumes (renames) the ones
	// it installs at once, so an old one is a snapshot raft declined.
	staleIncomingAge = 10 * time.Minute

	outgoingDir = "snap-outgoing"
	incomingDir = "snap-incoming"
	// incomingRefPrefix starts the Snapshot.Data the receiver hands to the
	// replica: a reference to the received directory, never wire data.
	incomingRefPrefix = "kvd-snapshot-incoming:"
)

var snapMagic = [4]byte{'k', 'v', 'd', 'S'}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// SnapshotStats counts snapshot transfers since NewTCP.
type SnapshotStats struct {
	// Sent counts streams the receiver acknowledged; SendFailures those that
	// failed anywhere (checkpoint, dial, stream, refusal, timeout, or a
	// second snapshot for a peer that already has one in flight).
	Sent, SendFailures uint64
	// Received counts streams verified, written and handed to the replica;
	// ReceiveFailures those rejected or broken.
	Received, ReceiveFailures uint64
	// BytesSent and BytesReceived count file bytes of completed transfers.
	BytesSent, BytesReceived uint64
	// LastSendDuration and LastSendBytes describe the latest successful send.
	LastSendDuration time.Duration
	LastSendBytes    uint64
}

// snapshotter streams snapshots for a TCP transport in streaming mode.
type snapshotter struct {
	t   *TCP
	src SnapshotSource
	dir string // the node's data dir; outgoing/ and incoming/ live below

	mu      sync.Mutex
	sending map[uint64]bool // peers with a send in flight
	recv    chan struct{}   // one receive at a time

	sent, sendFailures, received, receiveFailures atomic.Uint64
	bytesSent, bytesReceived                      atomic.Uint64
	lastSendNs, lastSendBytes                     atomic.Uint64
}

func newSnapshotter(t *TCP, src SnapshotSource, dir string) (*snapshotter, error) {
	// Nothing refers to staged snapshots across a restart: an outgoing
	// checkpoint belongs to a send that died, an incoming one to a message
	// the replica never saw.
	for _, sub := range []string{outgoingDir, incomingDir} {
		p := filepath.Join(dir, sub)
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("clear %s: %w", p, err)
		}
		if err := os.MkdirAll(p, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
	}
	return &snapshotter{t: t, src: src, dir: dir, sending: make(map[uint64]bool), recv: make(chan struct{}, 1)}, nil
}

func (s *snapshotter) stats() SnapshotStats {
	return SnapshotStats{
		Sent: s.sent.Load(), SendFailures: s.sendFailures.Load(),
		Received: s.received.Load(), ReceiveFailures: s.receiveFailures.Load(),
		BytesSent: s.bytesSent.Load(), BytesReceived: s.bytesReceived.Load(),
		LastSendDuration: time.Duration(s.lastSendNs.Load()), LastSendBytes: s.lastSendBytes.Load(),
	}
}

// send starts streaming m to p unless a send to p is in flight (then m fails
// at once: raft retries after the report). It never blocks. Called from Send
// with t.mu read-locked and the transport open.
func (s *snapshotter) send(p *peer, m *pb.Message) {
	s.mu.Lock()
	busy := s.sending[p.id]
	s.sending[p.id] = true
	s.mu.Unlock()
	if busy {
		s.sendFailures.Add(1)
		p.log.Debug("snapshot send already in flight; failing this one")
		s.t.rep.snapshot(p.id, true)
		return
	}
	s.t.wg.Add(1)
	go func() {
		defer s.t.wg.Done()
		start := time.Now()
		n, err := s.stream(p, m)
		s.mu.Lock()
		delete(s.sending, p.id)
		s.mu.Unlock()
		if err != nil {
			s.sendFailures.Add(1)
			if p.ctx.Err() == nil {
				p.log.Warn("snapshot send failed", "index", m.GetSnapshot().GetMetadata().GetIndex(), "err", err)
			}
		} else {
			d := time.Since(start)
			s.sent.Add(1)
			s.bytesSent.Add(n)
			s.lastSendNs.Store(uint64(d))
			s.lastSendBytes.Store(n)
			p.log.Info("sent snapshot", "index", m.GetSnapshot().GetMetadata().GetIndex(), "bytes", n, "duration", d)
		}
		s.t.rep.snapshot(p.id, err != nil)
	}()
}

// stream checkpoints the state store, sends it with m and waits for the
// receiver's verdict; it returns the file bytes sent.
func (s *snapshotter) stream(p *peer, m *pb.Message) (uint64, error) {
	ctx, cancel := context.WithTimeout(p.ctx, s.t.cfg.SnapshotTimeout)
	defer cancel()
	dir := filepath.Join(s.dir, outgoingDir, fmt.Sprintf("%d-%d", p.id, time.Now().UnixNano()))
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			p.log.Warn("could not remove a sent checkpoint", "dir", dir, "err", err)
		}
	}()
	applied, err := s.src.Checkpoint(dir, p.id)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	// The leader compacts its log only behind the state store's synced
	// applied index, so the state always covers the compaction point raft
	// announces; anything else would make the follower skip entries.
	if idx := m.GetSnapshot().GetMetadata().GetIndex(); applied < idx {
		p.log.Error("state store behind the snapshot's compaction point: not sending", "applied", applied, "index", idx)
		return 0, fmt.Errorf("state applied to %d is behind the snapshot index %d", applied, idx)
	}
	files, err := listCheckpoint(dir)
	if err != nil {
		return 0, err
	}
	conn, _, err := dialPeer(ctx, p.addr, s.t.cfg.DialTimeout, hello{
		Version: ProtocolVersion, Flags: flagSnapshot, ClusterID: s.t.cfg.ClusterID, From: s.t.cfg.LocalID, To: p.id,
	}, s.t.tls)
	if err != nil {
		return 0, fmt.Errorf("dial: %w", err)
	}
	release := afterFunc(ctx, func() { conn.Close() })
	defer release()
	defer conn.Close()
	ic := &idleConn{Conn: conn, idle: snapIdleTimeout}
	bw := bufio.NewWriterSize(ic, 64<<10)
	n, err := writeSnapshotStream(bw, m, dir, files)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return 0, fmt.Errorf("stream %d files: %w", len(files), err)
	}
	conn.SetReadDeadline(time.Now().Add(snapAckTimeout))
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return 0, fmt.Errorf("wait for the receiver's verdict: %w", err)
	}
	if ack[0] != snapAckOK {
		return 0, errors.New("receiver refused the snapshot (see its log)")
	}
	return n, nil
}

// listCheckpoint names the files of a checkpoint; Pebble writes them flat.
func listCheckpoint(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoint: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("checkpoint %s holds %q, which is not a regular file", dir, e.Name())
		}
		names = append(names, e.Name())
	}
	return names, nil
}

// receive runs an accepted snapshot stream from the peer from: files into a
// fresh directory under snap-incoming, then the MsgSnap, pointing at that
// directory, to the replica, then the verdict to the sender.
func (s *snapshotter) receive(conn net.Conn, from uint64, log *slog.Logger) {
	select {
	case s.recv <- struct{}{}:
		defer func() { <-s.recv }()
	default:
		s.receiveFailures.Add(1)
		log.Warn("refusing a snapshot stream: another is being received")
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(s.t.ctx, s.t.cfg.SnapshotTimeout)
	defer cancel()
	release := afterFunc(ctx, func() { conn.Close() })
	defer release()
	m, n, err := s.receiveFiles(ctx, conn, from)
	ack := byte(snapAckOK)
	if err != nil {
		s.receiveFailures.Add(1)
		ack = snapAckFailed
		if s.t.ctx.Err() == nil {
			log.Warn("snapshot receive failed", "err", err)
		}
	} else {
		s.received.Add(1)
		s.bytesReceived.Add(n)
		log.Info("received snapshot", "index", m.GetSnapshot().GetMetadata().GetIndex(),
			"term", m.GetSnapshot().GetMetadata().GetTerm(), "bytes", n, "duration", time.Since(start))
	}
	conn.SetWriteDeadline(time.Now().Add(snapIdleTimeout))
	_, _ = conn.Write([]byte{ack})
}

func (s *snapshotter) receiveFiles(ctx context.Context, conn net.Conn, from uint64) (*pb.Message, uint64, error) {
	parent := filepath.Join(s.dir, incomingDir)
	s.removeStale(parent)
	name := fmt.Sprintf("%d-%d", from, time.Now().UnixNano())
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o750); err != nil {
		return nil, 0, fmt.Errorf("create %s: %w", dir, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.RemoveAll(dir)
		}
	}()
	ic := &idleConn{Conn: conn, idle: snapIdleTimeout}
	m, sum, err := readSnapshotStream(bufio.NewReaderSize(ic, readBufferSize), dirSink(dir))
	if err != nil {
		return nil, 0, err
	}
	if m.GetFrom() != from || m.GetTo() != s.t.cfg.LocalID {
		return nil, 0, fmt.Errorf("%w: snapshot from %d to %d on the stream of %d to %d",
			errProtocol, m.GetFrom(), m.GetTo(), from, s.t.cfg.LocalID)
	}
	for _, d := range []string{dir, parent} {
		if err := fsyncDir(d); err != nil {
			return nil, 0, err
		}
	}
	m.Snapshot.Data = []byte(incomingRefPrefix + name)
	if err := s.t.h.Step(ctx, m); err != nil {
		return nil, 0, fmt.Errorf("hand the snapshot to the replica: %w", err)
	}
	keep = true // the replica owns it now
	return m, sum.bytes, nil
}

// removeStale deletes received directories old enough that raft must have
// declined them (see staleIncomingAge).
func (s *snapshotter) removeStale(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < staleIncomingAge {
			continue
		}
		_ = os.RemoveAll(filepath.Join(parent, e.Name()))
	}
}

// IncomingSnapshotDir resolves the Snapshot.Data of a MsgSnap this transport
// handed to the replica into the directory holding the received state.
// dataDir is Config.SnapshotDir. Anything else, including a MsgSnap that did
// not come through a snapshot stream, is an error.
func IncomingSnapshotDir(dataDir string, ref []byte) (string, error) {
	name, ok := strings.CutPrefix(string(ref), incomingRefPrefix)
	if !ok || !validFileName(name) {
		return "", fmt.Errorf("snapshot data %q does not refer to a received snapshot", ref)
	}
	return filepath.Join(dataDir, incomingDir, name), nil
}

// idleConn moves the deadline forward before each read and write, so a
// transfer may take long overall but never stalls long.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(b)
}

// writeSnapshotStream writes the stream for m and the named files of dir,
// each copied through one fixed buffer, and returns the file bytes written.
func writeSnapshotStream(w io.Writer, m *pb.Message, dir string, files []string) (uint64, error) {
	body, err := proto.Marshal(m)
	if err != nil {
		return 0, fmt.Errorf("marshal MsgSnap: %w", err)
	}
	if len(body) > maxSnapMsgSize {
		return 0, fmt.Errorf("MsgSnap of %d bytes: larger than the limit of %d", len(body), maxSnapMsgSize)
	}
	if len(files) > maxSnapFiles {
		return 0, fmt.Errorf("checkpoint has %d files, more than a stream may carry (%d)", len(files), maxSnapFiles)
	}
	hdr := make([]byte, 0, 12)
	hdr = append(hdr, snapMagic[:]...)
	hdr = binary.BigEndian.AppendUint16(hdr, snapStreamVersion)
	hdr = binary.BigEndian.AppendUint16(hdr, 0)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(body)))
	if _, err := w.Write(hdr); err != nil {
		return 0, err
	}
	if _, err := w.Write(body); err != nil {
		return 0, err
	}
	buf := make([]byte, snapCopyBuffer)
	var total uint64
	for _, name := range files {
		n, err := writeSnapshotFile(w, filepath.Join(dir, name), name, buf)
		if err != nil {
			return 0, fmt.Errorf("file %s: %w", name, err)
		}
		total += n
		failpoint.Hit(failpoint.SnapshotSend)
	}
	end := make([]byte, 0, 13)
	end = append(end, snapTagEnd)
	end = binary.BigEndian.AppendUint32(end, uint32(len(files)))
	end = binary.BigEndian.AppendUint64(end, total)
	if _, err := w.Write(end); err != nil {
		return 0, err
	}
	return total, nil
}

func writeSnapshotFile(w io.Writer, path, name string, buf []byte) (uint64, error) {
	if !validFileName(name) {
		return 0, fmt.Errorf("name %q cannot travel in a snapshot stream", name)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := uint64(info.Size())
	if size > maxSnapFileSize {
		return 0, fmt.Errorf("%d bytes: larger than a stream may carry", size)
	}
	hdr := make([]byte, 0, 3+len(name)+8)
	hdr = append(hdr, snapTagFile)
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(len(name)))
	hdr = append(hdr, name...)
	hdr = binary.BigEndian.AppendUint64(hdr, size)
	if _, err := w.Write(hdr); err != nil {
		return 0, err
	}
	crc := crc32.New(crcTable)
	// Exactly size bytes: checkpoint files are immutable, and a file that
	// changed under us must fail here rather than desynchronise the stream.
	n, err := io.CopyBuffer(io.MultiWriter(w, crc), io.LimitReader(f, int64(size)), buf)
	if err != nil {
		return 0, err
	}
	if uint64(n) != size {
		return 0, fmt.Errorf("read %d of %d bytes: file shrank", n, size)
	}
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return 0, err
	}
	return size, nil
}

// fileSink receives the files of a stream. create is called once per name.
type fileSink interface {
	create(name string) (sinkFile, error)
}

// sinkFile is one received file. Close makes it durable, once it is whole
// and its checksum agrees; abort releases a file the stream failed in,
// which is deleted with its directory, without that cost.
type sinkFile interface {
	io.WriteCloser
	abort()
}

// dirSink writes files into a directory; Close fsyncs each one.
type dirSink string

func (d dirSink) create(name string) (sinkFile, error) {
	f, err := os.OpenFile(filepath.Join(string(d), name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, err
	}
	return syncedFile{f}, nil
}

type syncedFile struct{ *os.File }

func (f syncedFile) Close() error {
	if err := f.File.Sync(); err != nil {
		_ = f.File.Close()
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	return f.File.Close()
}

// abort closes without the fsync: flushing up to a whole file of data
// about to be deleted would only delay the failure, and Close, which
// waits for the receive.
func (f syncedFile) abort() { _ = f.File.Close() }

func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// streamSummary is what a decoded stream carried besides its message.
type streamSummary struct {
	files int
	bytes uint64
}

// readSnapshotStream decodes a stream: the MsgSnap, then each file into
// sink, verifying its checksum, then the end marker, which must agree with
// what was read. Every length is checked before use and file bytes pass
// through one fixed buffer, so a hostile stream costs at most what it
// declares on disk (bounded by maxSnapFileSize per file) and never memory.
// Any violation is an error wrapping errProtocol; a file that fails its
// checksum may already be partly written to the sink.
func readSnapshotStream(r io.Reader, sink fileSink) (*pb.Message, streamSummary, error) {
	var sum streamSummary
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, sum, fmt.Errorf("read stream header: %w", unexpected(err))
	}
	if [4]byte(hdr[:4]) != snapMagic {
		return nil, sum, fmt.Errorf("%w: bad snapshot stream magic %q", errProtocol, hdr[:4])
	}
	if v := binary.BigEndian.Uint16(hdr[4:]); v != snapStreamVersion {
		return nil, sum, fmt.Errorf("%w: snapshot stream version %d, want %d", errProtocol, v, snapStreamVersion)
	}
	if f := binary.BigEndian.Uint16(hdr[6:]); f != 0 {
		return nil, sum, fmt.Errorf("%w: reserved snapshot stream flags %#x", errProtocol, f)
	}
	size := binary.BigEndian.Uint32(hdr[8:])
	if size == 0 || size > maxSnapMsgSize {
		return nil, sum, fmt.Errorf("%w: MsgSnap length %d outside 1..%d", errProtocol, size, maxSnapMsgSize)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, sum, fmt.Errorf("read MsgSnap: %w", unexpected(err))
	}
	m := new(pb.Message)
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, sum, fmt.Errorf("%w: MsgSnap: %v", errProtocol, err)
	}
	if m.GetType() != pb.MsgSnap || m.GetSnapshot().GetMetadata().GetIndex() == 0 {
		return nil, sum, fmt.Errorf("%w: stream opens with %s at snapshot index %d, want a MsgSnap",
			errProtocol, m.GetType(), m.GetSnapshot().GetMetadata().GetIndex())
	}
	seen := make(map[string]bool)
	buf := make([]byte, snapCopyBuffer)
	for {
		var tag [1]byte
		if _, err := io.ReadFull(r, tag[:]); err != nil {
			return nil, sum, fmt.Errorf("read record tag: %w", unexpected(err))
		}
		switch tag[0] {
		case snapTagEnd:
			var end [12]byte
			if _, err := io.ReadFull(r, end[:]); err != nil {
				return nil, sum, fmt.Errorf("read end marker: %w", unexpected(err))
			}
			files, total := binary.BigEndian.Uint32(end[:]), binary.BigEndian.Uint64(end[4:])
			if uint64(files) != uint64(sum.files) || total != sum.bytes {
				return nil, sum, fmt.Errorf("%w: end marker says %d files of %d bytes, stream had %d of %d",
					errProtocol, files, total, sum.files, sum.bytes)
			}
			return m, sum, nil
		case snapTagFile:
			if sum.files >= maxSnapFiles {
				return nil, sum, fmt.Errorf("%w: more than %d files", errProtocol, maxSnapFiles)
			}
			n, err := readSnapshotFile(r, sink, seen, buf)
			if err != nil {
				return nil, sum, err
			}
			sum.files++
			sum.bytes += n
			failpoint.Hit(failpoint.SnapshotReceive)
		default:
			return nil, sum, fmt.Errorf("%w: unknown record tag %#x", errProtocol, tag[0])
		}
	}
}

func readSnapshotFile(r io.Reader, sink fileSink, seen map[string]bool, buf []byte) (uint64, error) {
	var nl [2]byte
	if _, err := io.ReadFull(r, nl[:]); err != nil {
		return 0, fmt.Errorf("read file name length: %w", unexpected(err))
	}
	n := binary.BigEndian.Uint16(nl[:])
	if n == 0 || n > maxSnapNameLen {
		return 0, fmt.Errorf("%w: file name length %d outside 1..%d", errProtocol, n, maxSnapNameLen)
	}
	nb := make([]byte, n)
	if _, err := io.ReadFull(r, nb); err != nil {
		return 0, fmt.Errorf("read file name: %w", unexpected(err))
	}
	name := string(nb)
	if !validFileName(name) {
		return 0, fmt.Errorf("%w: file name %q", errProtocol, name)
	}
	if seen[name] {
		return 0, fmt.Errorf("%w: file %q sent twice", errProtocol, name)
	}
	seen[name] = true
	var sz [8]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return 0, fmt.Errorf("read size of %s: %w", name, unexpected(err))
	}
	size := binary.BigEndian.Uint64(sz[:])
	if size > maxSnapFileSize {
		return 0, fmt.Errorf("%w: file %s declares %d bytes, limit %d", errProtocol, name, size, uint64(maxSnapFileSize))
	}
	w, err := sink.create(name)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", name, err)
	}
	// The file is made durable (Close) only once it is whole and its
	// checksum agrees; on any failure it is aborted.
	ok := false
	defer func() {
		if !ok {
			w.abort()
		}
	}()
	crc := crc32.New(crcTable)
	copied, err := io.CopyBuffer(io.MultiWriter(w, crc), io.LimitReader(r, int64(size)), buf)
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", name, err)
	}
	if uint64(copied) != size {
		return 0, fmt.Errorf("copy %s: %w after %d of %d bytes", name, io.ErrUnexpectedEOF, copied, size)
	}
	var sumb [4]byte
	if _, err := io.ReadFull(r, sumb[:]); err != nil {
		return 0, fmt.Errorf("read checksum of %s: %w", name, unexpected(err))
	}
	if got, want := crc.Sum32(), binary.BigEndian.Uint32(sumb[:]); got != want {
		return 0, fmt.Errorf("%w: file %s checksum %08x, stream says %08x", errProtocol, name, got, want)
	}
	ok = true // Close consumes w whatever it returns
	if err := w.Close(); err != nil {
		return 0, fmt.Errorf("write %s: %w", name, err)
	}
	return size, nil
}

// validFileName accepts the plain names a checkpoint holds: no path
// separators, nothing that walks out of the directory, nothing unprintable.
func validFileName(name string) bool {
	if name == "" || len(name) > maxSnapNameLen || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '/' || c == '\\' || c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// unexpected turns a clean EOF inside a structure into ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
