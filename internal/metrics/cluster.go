package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvd-project/kvd/internal/replica"
	"github.com/kvd-project/kvd/internal/transport"
)

// ClusterSource is what the cluster collector reads: snapshot installs from
// the replica and the peer transport's counters. Peers may report false: a
// group of one has no transport until a member is added.
type ClusterSource struct {
	Snapshots func() replica.SnapshotStats
	Peers     func() (transport.Stats, bool)
	// PeerName names a peer by ID for the peer label; "" falls back to hex.
	PeerName func(id uint64) string
}

// clusterCollector exposes snapshot and peer metrics at scrape time.
type clusterCollector struct {
	src ClusterSource

	installed, installFailures, lastSnapIndex             *prometheus.Desc
	sent, sendFailures, received, receiveFailures         *prometheus.Desc
	bytesSent, bytesReceived                              *prometheus.Desc
	peerTLSRefused                                        *prometheus.Desc
	peerRTT, peerConnected, peerSent, peerDropped, peerRx *prometheus.Desc
}

func newClusterCollector(src ClusterSource) *clusterCollector {
	return &clusterCollector{
		src:             src,
		installed:       desc("raft", "snapshots_installed_total", "Snapshots of the data installed on this node (it was behind the leader's compacted log)."),
		installFailures: desc("raft", "snapshot_install_failures_total", "Snapshot installs that failed (each stops the node)."),
		lastSnapIndex:   desc("raft", "snapshot_last_index", "Raft index of the latest snapshot installed on this node (0: none)."),
		sent:            desc("raft", "snapshots_sent_total", "Snapshot streams sent to followers and acknowledged."),
		sendFailures:    desc("raft", "snapshot_send_failures_total", "Snapshot streams to followers that failed."),
		received:        desc("raft", "snapshots_received_total", "Snapshot streams received, verified and handed to raft."),
		receiveFailures: desc("raft", "snapshot_receive_failures_total", "Snapshot streams rejected or broken."),
		bytesSent:       desc("raft", "snapshot_sent_bytes_total", "File bytes of completed snapshot sends."),
		bytesReceived:   desc("raft", "snapshot_received_bytes_total", "File bytes of completed snapshot receives."),
		peerTLSRefused:  desc("raft", "peer_tls_refused_total", "Inbound peer connections refused by mutual TLS: a failed handshake (a plaintext peer, a certificate the peer CA did not sign or that expired) or a certificate naming another member."),
		peerRTT:         desc("raft", "peer_round_trip_seconds", "Round trip of the latest handshake with each peer.", "peer"),
		peerConnected:   desc("raft", "peer_connected", "1 while the outbound connection to the peer is up.", "peer"),
		peerSent:        desc("raft", "peer_messages_sent_total", "Raft messages written to each peer.", "peer"),
		peerDropped:     desc("raft", "peer_messages_dropped_total", "Raft messages to each peer dropped (full queue, unreachable, removed).", "peer"),
		peerRx:          desc("raft", "peer_messages_received_total", "Raft messages received from each peer.", "peer"),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.installed, c.installFailures, c.lastSnapIndex, c.sent, c.sendFailures,
		c.received, c.receiveFailures, c.bytesSent, c.bytesReceived, c.peerTLSRefused, c.peerRTT, c.peerConnected, c.peerSent, c.peerDropped, c.peerRx} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if c.src.Snapshots != nil {
		s := c.src.Snapshots()
		counter(c.installed, float64(s.Installed))
		counter(c.installFailures, float64(s.Failures))
		gauge(c.lastSnapIndex, float64(s.LastIndex))
	}
	var ts transport.Stats
	ok := false
	if c.src.Peers != nil {
		ts, ok = c.src.Peers()
	}
	// Counters are exposed from the start (zero for a group of one), so
	// that rate() sees the first increment.
	counter(c.sent, float64(ts.Snapshots.Sent))
	counter(c.sendFailures, float64(ts.Snapshots.SendFailures))
	counter(c.received, float64(ts.Snapshots.Received))
	counter(c.receiveFailures, float64(ts.Snapshots.ReceiveFailures))
	counter(c.bytesSent, float64(ts.Snapshots.BytesSent))
	counter(c.bytesReceived, float64(ts.Snapshots.BytesReceived))
	counter(c.peerTLSRefused, float64(ts.TLSRefused))
	if !ok {
		return
	}
	for id, p := range ts.Peers {
		name := ""
		if c.src.PeerName != nil {
			name = c.src.PeerName(id)
		}
		if name == "" {
			name = strconv.FormatUint(id, 16)
		}
		gauge(c.peerRTT, p.RTT.Seconds(), name)
		gauge(c.peerConnected, b2f(p.Connected), name)
		counter(c.peerSent, float64(p.Sent), name)
		counter(c.peerDropped, float64(p.Dropped), name)
		counter(c.peerRx, float64(p.Received), name)
	}
}
