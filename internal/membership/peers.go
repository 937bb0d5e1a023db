package membership

import (
	"context"
	"slices"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/replica"
	"github.com/kvd-project/kvd/internal/transport"
)

// watchMembers keeps the transport's peers equal to raft's configuration,
// publishes this node's addresses into the member table once it is ready,
// and reports this node's removal. It runs until ctx ends.
func (c *Controller) watchMembers(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var nextPublish, nextProbe, nextAsk time.Time
	for {
		st := c.rep.Status()
		if c.leftCluster(st) {
			c.markRemoved()
			return
		}
		if err := c.syncPeers(st); err != nil {
			c.logger.Error("peer transport", "err", err)
		}
		if time.Now().After(nextAsk) && c.needsLeaderAddr(st) {
			c.learnLeaderAddr(ctx, st.Leader)
			nextAsk = time.Now().Add(askLeaderEvery)
		}
		if st.Leader == 0 && time.Now().After(nextProbe) {
			// A member that hears from no leader dials its peers: one
			// removed while it was down is told so only at a handshake
			// with the leader, and a learner has nothing of its own to
			// send that would dial.
			c.probePeers()
			nextProbe = time.Now().Add(probeEvery)
		}
		if st.Ready && time.Now().After(nextPublish) {
			if err := c.publishSelf(ctx, st); err != nil {
				c.logger.Warn("publish member addresses", "err", err)
				nextPublish = time.Now().Add(2 * time.Second)
			} else {
				nextPublish = time.Now().Add(10 * time.Second)
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// probeEvery spaces the dials of a member that has no leader.
const probeEvery = 2 * time.Second

func (c *Controller) probePeers() {
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	if c.peers != nil {
		c.peers.Probe()
	}
}

func (c *Controller) syncPeers(st replica.Status) error {
	want := map[uint64]string{}
	rows := c.rows()
	for _, id := range slices.Concat(st.Voters, st.Learners) {
		if id != st.ID {
			want[uint64(id)] = rows[uint64(id)].PeerAddr
		}
	}
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	if len(want) == 0 && c.peers == nil {
		return nil
	}
	if c.peers == nil {
		tr, err := c.newTransport(nil)
		if err != nil {
			return err
		}
		tr.Start()
		c.peers = tr
		c.sender.Store(tr)
	}
	for id, addr := range want {
		if addr == "" {
			continue // known by ID only until it publishes; it can still dial us
		}
		if c.peerAddrs[id] != addr {
			c.peers.AddPeer(id, addr)
			c.peerAddrs[id] = addr
		}
	}
	catchingUp := c.catchingUp(st)
	if c.learned != 0 && (c.learned != uint64(st.Leader) || want[c.learned] != "") {
		c.learned = 0 // no longer the leader, or known by now
	}
	for id := range c.peerAddrs {
		if _, ok := want[id]; ok || id == c.learned {
			continue
		}
		if catchingUp && slices.ContainsFunc(c.file.Members, func(m FileMember) bool { return m.ID == id }) {
			// A member of the cluster it joined, missing only from the
			// history this node replays: it may be the leader that
			// history comes from, whose messages need answers.
			continue
		}
		c.peers.RemovePeer(id)
		delete(c.peerAddrs, id)
	}
	return nil
}

// catchingUp reports whether this node, a member that joined a running
// cluster, is still replaying the cluster's history up to its own
// addition. It starts from the founding configuration, so until then the
// configurations it applies leave out the members its join answer
// (cluster.json) names that joined after the founding, the leader among
// them perhaps. Where its addition is not recorded (a join answered by an
// older kvd), until it finds itself in the configuration.
func (c *Controller) catchingUp(st replica.Status) bool {
	if len(c.file.Bootstrap) == 0 {
		return false // a founding member: its history starts with it
	}
	if since, known := c.memberSince(); known {
		return st.Applied < since
	}
	return !slices.Contains(st.Voters, st.ID) && !slices.Contains(st.Learners, st.ID)
}

// PeerStats reads the transport's counters; false while there is none.
func (c *Controller) PeerStats() (transport.Stats, bool) {
	c.peerMu.Lock()
	t := c.peers
	c.peerMu.Unlock()
	if t == nil {
		return transport.Stats{}, false
	}
	return t.Stats(), true
}

// publishSelf writes this node's advertised addresses into the member table
// when they differ from what it holds (first start, or new addresses).
func (c *Controller) publishSelf(ctx context.Context, st replica.Status) error {
	if !slices.Contains(st.Voters, st.ID) && !slices.Contains(st.Learners, st.ID) {
		return nil
	}
	want := fsm.Member{ID: uint64(st.ID), Name: c.cfg.Name, PeerAddr: c.adv.Peer, HTTPAddr: c.adv.HTTP, MemcacheAddr: c.adv.Memcache}
	have, ok := c.rows()[uint64(st.ID)]
	if ok && have == want {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	_, err := c.kv.Do(ctx, &command.Command{Op: command.OpMember, Member: command.MemberAttrs{
		ID: want.ID, Name: want.Name, PeerAddr: want.PeerAddr, HTTPAddr: want.HTTPAddr, MemcacheAddr: want.MemcacheAddr,
	}})
	return err
}
