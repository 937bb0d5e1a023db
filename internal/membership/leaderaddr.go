package membership

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/replica"
)

// A member restarted after others joined and one of them took the lead
// hears from a leader that neither its configuration nor its member table
// knows: it learns the leader's address only by applying the leader's
// entries, and it cannot get them, because its answers to the leader are
// dropped for want of an address (the leader probes once and waits for an
// answer that never comes). etcd's peers learn a sender's address from its
// connection; kvd's connections carry one direction only, so the member
// asks the members it knows, over HTTP, where their leader is. The
// handshake checks the address: a dial reaches only the member whose ID
// it names (transport statusWrongNode), so a stale or wrong answer costs a
// failed dial, never a message to the wrong node.

// askLeaderEvery spaces the rounds of asking; askLeaderTimeout bounds the
// ask of one member, so that one that drops packets does not use up the
// round before the others are asked.
const (
	askLeaderEvery   = time.Second
	askLeaderTimeout = 500 * time.Millisecond
)

// needsLeaderAddr reports whether st follows a leader the transport has no
// address for.
func (c *Controller) needsLeaderAddr(st replica.Status) bool {
	if st.Leader == 0 || st.Leader == st.ID {
		return false
	}
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	return c.peers != nil && c.peerAddrs[uint64(st.Leader)] == ""
}

// learnLeaderAddr asks the members whose HTTP address the member table
// holds for leader's peer address, and gives the first one found to the
// transport until syncPeers finds the leader in the configuration (or
// raft follows another).
func (c *Controller) learnLeaderAddr(ctx context.Context, leader replica.NodeID) {
	self := uint64(IDOf(c.cfg.Name))
	var errs []error
	for id, m := range c.rows() {
		if id == self || m.HTTPAddr == "" {
			continue
		}
		addr, err := askPeerAddr(ctx, c.cfg.HTTP, m.HTTPAddr, leader)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		c.peerMu.Lock()
		if c.peers != nil && c.peerAddrs[uint64(leader)] == "" {
			c.peers.AddPeer(uint64(leader), addr)
			c.peerAddrs[uint64(leader)] = addr
			c.learned = uint64(leader)
		}
		c.peerMu.Unlock()
		c.logger.Info("learned the leader's peer address from another member", "leader", leader, "peer_addr", addr, "from", m.Name)
		return
	}
	c.logger.Debug("no member told the leader's peer address", "leader", leader, "errs", errs)
}

// askPeerAddr reads id's peer address from the member at httpAddr (GET
// /v1/cluster, that member's applied configuration and member table).
func askPeerAddr(ctx context.Context, h HTTP, httpAddr string, id replica.NodeID) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, askLeaderTimeout)
	defer cancel()
	var cs httpapi.ClusterStatus
	status, err := getJSON(ctx, h, httpAddr, "/v1/cluster", 1<<20, &cs)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("GET /v1/cluster: %d %s", status, http.StatusText(status))
	}
	want := strconv.FormatUint(uint64(id), 16)
	for _, m := range cs.Members {
		if m.ID == want && m.PeerAddr != "" {
			return m.PeerAddr, nil
		}
	}
	return "", fmt.Errorf("GET /v1/cluster: member %s not listed with a peer address", want)
}
