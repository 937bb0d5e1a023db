package transport

import (
	"maps"
	"time"
)

// Stats is a point-in-time view of a TCP transport, for metrics and
// `kvd cluster status`. Counters are cumulative since NewTCP (for a peer:
// since it was first added; RemovePeer discards them).
type Stats struct {
	// Peers holds one entry per current peer.
	Peers map[NodeID]PeerStats
	// UnknownDropped counts messages for IDs that are not peers, or sent
	// after Close.
	UnknownDropped uint64
	// Inbound is the number of established inbound connections.
	Inbound int
	// Snapshots counts snapshot streams (zero unless streaming is on).
	Snapshots SnapshotStats
	// TLSRefused counts inbound connections refused by peer TLS: a failed
	// TLS handshake (a plaintext peer, a certificate the peer CA did not
	// sign or that expired) or a certificate that does not name the member
	// the hello claims. Outbound ones count in PeerStats.DialFailures.
	TLSRefused uint64
}

// PeerStats describes the link to one peer.
type PeerStats struct {
	Addr string
	// Connected is true while the outbound connection is established.
	Connected bool
	// Sent counts messages written to the socket; Dropped those discarded
	// for any reason (full queue, dial or write failure, too large, peer
	// removed or address changed); Received those stepped from the peer.
	Sent, Dropped, Received uint64
	// Dials counts connection attempts, DialFailures the failed ones
	// (including refused handshakes).
	Dials, DialFailures uint64
	// RTT is the handshake round trip of the latest outbound connection; 0
	// before the first one.
	RTT time.Duration
}

// Stats returns the current statistics. Safe for concurrent use.
func (t *TCP) Stats() Stats {
	t.mu.RLock()
	peers := maps.Clone(t.peers)
	inbound := len(t.inbound)
	t.mu.RUnlock()
	s := Stats{
		Peers:          make(map[NodeID]PeerStats, len(peers)),
		UnknownDropped: t.unknownDropped.Load(),
		Inbound:        inbound,
		TLSRefused:     t.tlsRefused.Load(),
	}
	if t.snap != nil {
		s.Snapshots = t.snap.stats()
	}
	for id, p := range peers {
		c := p.c
		s.Peers[id] = PeerStats{
			Addr:         p.addr,
			Connected:    p.connected.Load(),
			Sent:         c.sent.Load(),
			Dropped:      c.dropped.Load(),
			Received:     c.received.Load(),
			Dials:        c.dials.Load(),
			DialFailures: c.dialFailures.Load(),
			RTT:          time.Duration(p.rtt.Load()),
		}
	}
	return s
}
