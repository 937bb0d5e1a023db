// Package transport owns raft peer messaging between kvd nodes: it carries
// the *raftpb.Message values of one node's Ready to the other members and
// hands the ones addressed to this node to the local replica. It knows
// nothing of raft's algorithm (it imports only raftpb) and nothing of kv
// data.
//
// # Who calls it
//
// The node's composition root builds a TCP transport from the --peer-addr
// and --initial-cluster settings, gives it the replica as Handler, and
// calls Start and, at shutdown, Close. The replica's Ready loop calls Send
// (step 2 of the Ready contract); Send never waits for the network, so the
// loop cannot stall on a slow or dead peer. Membership changes call AddPeer
// and RemovePeer from whichever goroutine applies them. Stats may be called
// from any goroutine (the metrics scrape, cluster status).
//
// In the other direction the transport calls the Handler:
//
//   - Step, from the reader goroutine of the inbound connection the message
//     arrived on, so each peer's messages are stepped in the order it sent
//     them. A Step that blocks holds back that peer only (TCP backpressure).
//     An error other than a context cancellation is logged at debug.
//   - ReportUnreachable and ReportSnapshot, from one reporting goroutine and
//     never from inside Send, so the replica may pass them to its Ready loop
//     over a channel without deadlocking. ReportUnreachable(id) follows a
//     failed dial or handshake, a failed write, a full queue or a message
//     for an unknown peer; it is rate-limited to one call per peer per 50ms.
//     ReportSnapshot(id, failed) follows each attempt to send a MsgSnap.
//
// # Goroutines and bounds
//
// A TCP transport runs one accept loop, one reporter, one writer per peer
// and one reader per inbound connection (at most one established connection
// per sender ID, at most 256 inbound connections including those still
// handshaking). Each peer has a queue of Config.QueueSize messages; when it
// is full, Send drops. A writer dials lazily, when it has something to send;
// after a failure it waits a jittered backoff (50ms doubling up to
// Config.MaxBackoff) before dialling again, and drops whatever was queued
// when a dial fails, since raft resends what matters. Each write drains the
// queue, up to 8 MiB, into one buffer written with one Write call: raft
// sends many small messages, and batching is what makes them cheap. Close
// closes the listener and every connection, aborts dials in progress and
// waits for every goroutine; it does not wait for dial or write timeouts.
//
// # Wire format (version 1)
//
// Each connection carries messages in one direction, from the dialer to the
// acceptor; a pair of nodes uses two connections. All integers are big
// endian. The dialer opens with a 32-byte hello:
//
//	magic   [4]byte  "kvdP"
//	version uint16   1
//	flags   uint16   0 (reserved)
//	cluster uint64   the dialer's cluster ID
//	from    uint64   the dialer's node ID
//	to      uint64   the node ID the dialer believes it reached
//
// The acceptor answers with a 24-byte response:
//
//	magic   [4]byte  "kvdP"
//	version uint16   the acceptor's version
//	status  uint16   0 ok, 1 unsupported version, 2 cluster ID mismatch,
//	                 3 wrong node, 4 invalid sender, 5 malformed,
//	                 6 not a member, 7 certificate names another member
//	                 (peer TLS only)
//	cluster uint64   the acceptor's cluster ID
//	id      uint64   the acceptor's node ID
//
// Status 6 is followed by one more field, applied uint64: the acceptor's
// applied index, as of which its configuration leaves the dialer out. Only
// an acceptor given Config.NotMember answers it (kvd's leader does), and
// the dialer hands the index to Config.OnNotMember: a member removed while
// it was down learns so when it dials the leader (etcd's peers answer a
// removed member likewise); TCP.Probe dials without a message for one
// that has nothing to send. A dialer of an older build reads the 24 bytes
// and logs an unknown status.
//
// On a status other than 0 both sides log the reason at warn (status 6 at
// debug on the acceptor, which a removed member would otherwise flood) and
// the acceptor closes the connection; a hello with a bad magic is closed
// without an answer. After an accepted handshake the dialer sends frames:
//
//	length  uint32   body length, 1..MaxFrameSize (64 MiB), checked before
//	                 anything is allocated
//	body    one or more of:
//	          size uvarint, then size bytes: a proto-marshalled raftpb.Message
//
// Every message must be from the handshake's sender and to the acceptor. A
// frame that breaks any of these rules closes its connection (logged at
// warn); the transport and its other connections carry on.
//
// # Snapshots
//
// With Config.Snapshots set (as kvd sets it), a MsgSnap never travels on a
// message connection: a reader that meets one there closes the connection.
// Send hands it to a snapshot sender instead, at most one per peer (a second
// MsgSnap for a peer with a send in flight fails at once). The sender
// checkpoints the state store into <SnapshotDir>/snap-outgoing/ (Pebble hard
// links), checks that the checkpoint covers the MsgSnap's index, dials the
// peer with the hello flag 1 (snapshot stream; a receiver without streaming
// refuses it as malformed) and writes, all integers big endian:
//
//	magic   [4]byte  "kvdS"
//	version uint16   1
//	flags   uint16   0 (reserved)
//	length  uint32   1..1 MiB, then length bytes: the MsgSnap
//	then per file:   'F', name length uint16 (1..255), name (a plain file
//	                 name, no separators), size uint64, size bytes,
//	                 CRC-32C (Castagnoli) of those bytes uint32
//	then the end:    'E', file count uint32, total file bytes uint64
//
// File bytes pass through one 256 KiB buffer on both sides; nothing holds a
// whole file, let alone the whole state, in memory. The receiver (one stream
// at a time) writes the files into a fresh <SnapshotDir>/snap-incoming/<dir>,
// checks every checksum and the end marker, fsyncs the files and the
// directories, replaces the MsgSnap's Snapshot.Data with a reference to that
// directory (IncomingSnapshotDir resolves it) and Steps it; then it answers
// one byte, 0 accepted or 1 refused. ReportSnapshot(id, failed) follows that
// verdict, or any failure before it, and is never sent for a MsgSnap that
// is still streaming. A transfer may stall at most 30s per read or write
// (the sender waits up to 2m for the verdict, which follows the receiver's
// fsyncs) and take Config.SnapshotTimeout overall. The checkpoint is
// deleted after each attempt; a received directory is consumed (renamed) by
// the install, and one raft declined is deleted by a receive ten minutes
// later or by NewTCP.
//
// Without Config.Snapshots, MsgSnap travels like any other message and
// ReportSnapshot follows its write (tests of the transport alone).
//
// # Peer TLS
//
// With Config.TLS set, every connection, message or snapshot stream, is
// mutual TLS under the same protocol: the dialer runs the TLS handshake
// (tlsconf.Peer.ClientConfig: it presents this member's certificate and
// verifies the acceptor's chain against the peer CA, not its host name),
// then the hello as above inside the TLS session, all within DialTimeout;
// the acceptor runs its half (ServerConfig: a client certificate the CA
// signed is required) within DialTimeout, then reads the hello. The CA
// proves a certificate is one of the cluster's; which member it speaks for
// is the member it names (tlsconf.CheckMember, through Config.IDOf):
//
//   - the acceptor checks that the dialer's certificate names the hello's
//     sender, before anything else may accept it, and answers status 7
//     otherwise, so that no member can send as another;
//   - the dialer, once the hello is accepted, checks that the acceptor's
//     certificate names the member it dialled, and closes the connection
//     otherwise, so that nothing is sent to an impostor at a peer's
//     address.
//
// A member without peer TLS fails either way: its plaintext hello is not a
// TLS record, and a TLS hello does not carry kvd's magic. The acceptor logs
// each kind of refused connection (a failed TLS handshake, such as a
// plaintext peer or an untrusted or expired certificate, or a certificate
// naming another member) at warn once a minute per host, at debug in
// between, and counts them in Stats.TLSRefused; the dialer logs at warn
// when its failure changes, as for any failed dial. Certificates are picked
// per handshake, so a reload of the files (tlsconf.Source) applies to the
// next connection while established ones carry on.
//
// Closing a TLS connection closes its TCP connection without a close_notify
// alert, which could wait on a peer that stopped reading; the frames make a
// cut connection detectable anyway. Messages are not copied on the way: a
// batch is one Write into the TLS record layer, and a frame is read through
// the same bufio reader either way.
//
// # Testing
//
// MemNetwork is an in-memory variant with the same Send semantics and fault
// hooks (Partition, Cut, Heal, SetDrop, SetDelay) for deterministic tests of
// the replica and of whole clusters.
package transport
