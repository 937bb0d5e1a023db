package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/replica"
	"github.com/kvd-project/kvd/internal/transport"
)

// memberContext rides in a configuration change: who the member is. It is
// applied into the replicated member table with the change itself.
type memberContext struct {
	Name     string `json:"name"`
	PeerAddr string `json:"peer_addr"`
}

// memberChange turns a committed configuration change into its effect on
// the member table.
func memberChange(cc *replica.ConfChange) *fsm.MemberChange {
	mc := &fsm.MemberChange{ID: uint64(cc.ID), Remove: cc.Type == replica.RemoveMember}
	if cc.Type == replica.AddLearner {
		var c memberContext
		// A change without a readable context still changes raft's
		// configuration; the member is then known by ID until it publishes.
		if json.Unmarshal(cc.Context, &c) == nil {
			mc.Name, mc.PeerAddr = c.Name, c.PeerAddr
		}
	}
	return mc
}

// lazySender is the replica's transport. A group of one has no peers and
// binds no peer port until a member is added; until then there is nobody to
// send to.
type lazySender struct {
	t atomic.Pointer[transport.TCP]
}

func (s *lazySender) Send(msgs []*pb.Message) {
	if t := s.t.Load(); t != nil {
		t.Send(msgs)
	}
}

// Connected implements replica.Links: no peer is connected before the
// transport exists.
func (s *lazySender) Connected(id uint64) bool {
	t := s.t.Load()
	return t != nil && t.Connected(id)
}

// rows returns the member table: the replicated rows over the founding
// members this node's cluster.json names (a founding member has a row only
// once it has published its addresses).
func (n *Node) rows() map[uint64]fsm.Member {
	out := map[uint64]fsm.Member{}
	for _, m := range n.ms.Members {
		out[m.ID] = fsm.Member{ID: m.ID, Name: m.Name, PeerAddr: m.PeerAddr}
	}
	for _, m := range n.state.Members() {
		prev := out[m.ID]
		if m.Name == "" {
			m.Name = prev.Name
		}
		if m.PeerAddr == "" {
			m.PeerAddr = prev.PeerAddr
		}
		out[m.ID] = m
	}
	return out
}

// Member implements httpapi.Directory.
func (n *Node) Member(id kv.NodeID) (httpapi.MemberInfo, bool) {
	m, ok := n.rows()[uint64(id)]
	if !ok {
		return httpapi.MemberInfo{}, false
	}
	return httpapi.MemberInfo{Name: m.Name, PeerAddr: m.PeerAddr, HTTPAddr: m.HTTPAddr, MemcacheAddr: m.MemcacheAddr}, true
}

func (n *Node) idOfName(name string) replica.NodeID {
	for id, m := range n.rows() {
		if m.Name == name {
			return replica.NodeID(id)
		}
	}
	return IDOf(name)
}

// watchMembers keeps the transport's peers equal to raft's configuration,
// publishes this node's addresses into the member table once it is ready,
// and reports this node's removal. It runs until ctx ends.
func (n *Node) watchMembers(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var nextPublish, nextProbe, nextAsk time.Time
	for {
		st := n.rep.Status()
		if n.leftCluster(st) {
			n.markRemoved()
			return
		}
		if err := n.syncPeers(st); err != nil {
			n.logger.Error("peer transport", "err", err)
		}
		if time.Now().After(nextAsk) && n.needsLeaderAddr(st) {
			n.learnLeaderAddr(ctx, st.Leader)
			nextAsk = time.Now().Add(askLeaderEvery)
		}
		if st.Leader == 0 && time.Now().After(nextProbe) {
			// A member that hears from no leader dials its peers: one
			// removed while it was down is told so only at a handshake
			// with the leader, and a learner has nothing of its own to
			// send that would dial.
			n.probePeers()
			nextProbe = time.Now().Add(probeEvery)
		}
		if st.Ready && time.Now().After(nextPublish) {
			if err := n.publishSelf(ctx, st); err != nil {
				n.logger.Warn("publish member addresses", "err", err)
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

func (n *Node) probePeers() {
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	if n.peers != nil {
		n.peers.Probe()
	}
}

func (n *Node) syncPeers(st replica.Status) error {
	want := map[uint64]string{}
	rows := n.rows()
	for _, id := range slices.Concat(st.Voters, st.Learners) {
		if id != st.ID {
			want[uint64(id)] = rows[uint64(id)].PeerAddr
		}
	}
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	if len(want) == 0 && n.peers == nil {
		return nil
	}
	if n.peers == nil {
		tr, err := n.newTransport(nil)
		if err != nil {
			return err
		}
		tr.Start()
		n.peers = tr
		n.sender.t.Store(tr)
	}
	for id, addr := range want {
		if addr == "" {
			continue // known by ID only until it publishes; it can still dial us
		}
		if n.peerAddrs[id] != addr {
			n.peers.AddPeer(id, addr)
			n.peerAddrs[id] = addr
		}
	}
	catchingUp := n.catchingUp(st)
	if n.learned != 0 && (n.learned != uint64(st.Leader) || want[n.learned] != "") {
		n.learned = 0 // no longer the leader, or known by now
	}
	for id := range n.peerAddrs {
		if _, ok := want[id]; ok || id == n.learned {
			continue
		}
		if catchingUp && slices.ContainsFunc(n.ms.Members, func(m member) bool { return m.ID == id }) {
			// A member of the cluster it joined, missing only from the
			// history this node replays: it may be the leader that
			// history comes from, whose messages need answers.
			continue
		}
		n.peers.RemovePeer(id)
		delete(n.peerAddrs, id)
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
func (n *Node) catchingUp(st replica.Status) bool {
	if len(n.ms.Bootstrap) == 0 {
		return false // a founding member: its history starts with it
	}
	if since, known := n.memberSince(); known {
		return st.Applied < since
	}
	return !slices.Contains(st.Voters, st.ID) && !slices.Contains(st.Learners, st.ID)
}

// peerStats reads the transport's counters; false while there is none.
func (n *Node) peerStats() (transport.Stats, bool) {
	n.peerMu.Lock()
	t := n.peers
	n.peerMu.Unlock()
	if t == nil {
		return transport.Stats{}, false
	}
	return t.Stats(), true
}

func (n *Node) newTransport(peers map[uint64]string) (*transport.TCP, error) {
	return transport.NewTCP(transport.Config{
		ClusterID: n.ms.ClusterID, LocalID: uint64(IDOf(n.cfg.Name)), ListenAddr: n.cfg.PeerAddr, Peers: peers,
		// Snapshots are staged in the data dir, beside state/ they replace.
		Snapshots: n.state, SnapshotDir: n.cfg.DataDir,
		NotMember: n.notMember, OnNotMember: n.onNotMember,
	}, n.rep, n.logger.With("component", "transport"))
}

// publishSelf writes this node's advertised addresses into the member table
// when they differ from what it holds (first start, or new addresses).
func (n *Node) publishSelf(ctx context.Context, st replica.Status) error {
	if !slices.Contains(st.Voters, st.ID) && !slices.Contains(st.Learners, st.ID) {
		return nil
	}
	want := fsm.Member{ID: uint64(st.ID), Name: n.cfg.Name, PeerAddr: n.adv.peer, HTTPAddr: n.adv.http, MemcacheAddr: n.adv.memcache}
	have, ok := n.rows()[uint64(st.ID)]
	if ok && have == want {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	_, err := n.kv.Do(ctx, &command.Command{Op: command.OpMember, Member: command.MemberAttrs{
		ID: want.ID, Name: want.Name, PeerAddr: want.PeerAddr, HTTPAddr: want.HTTPAddr, MemcacheAddr: want.MemcacheAddr,
	}})
	return err
}

// advertised are the addresses this node publishes.
type advertised struct{ peer, http, memcache string }

// advertise picks the published address for a listener: the configured one,
// else the bound one with a wildcard host replaced by the host name.
func advertise(configured, bound string) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

func newRequestID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return binary.BigEndian.Uint64(b[:]) | 1
}

// AddMember implements httpapi.Admin. Adding a member that is already there
// with the same peer address answers as if it had just been added, so a
// joining node that crashed before saving its membership can retry.
func (n *Node) AddMember(ctx context.Context, m httpapi.MemberInfo) (httpapi.JoinInfo, error) {
	// A joiner says which versions it applies: one that cannot apply the
	// cluster's is refused here rather than stop later at a state or an
	// entry past its version. kvd cluster add does not say (a member so
	// added stops itself at that point instead), nor can a kvd from before
	// cluster versions, which would apply a snapshot's state by its own
	// rules: do not add one to a cluster past version 1.
	if cv := n.state.ClusterVersion(); m.MaxClusterVersion != 0 && m.MaxClusterVersion < cv {
		return httpapi.JoinInfo{}, fmt.Errorf("%w: %s applies versions up to %d, the cluster is at %d", kv.ErrVersionTooOld, m.Name, m.MaxClusterVersion, cv)
	}
	id := IDOf(m.Name)
	st := n.rep.Status()
	// Only the leader answers from its configuration: a follower's may be
	// behind the member's removal, and ChangeMember passes the request on.
	if st.Role == "leader" && (slices.Contains(st.Voters, id) || slices.Contains(st.Learners, id)) {
		if have, ok := n.rows()[uint64(id)]; ok && have.PeerAddr == m.PeerAddr {
			// The status that lists the member was published after its
			// addition was applied: its applied index is at or after it.
			return n.joinInfo(id, st.Applied), nil
		}
		return httpapi.JoinInfo{}, fmt.Errorf("%w: %s", kv.ErrMemberExists, m.Name)
	}
	b, err := json.Marshal(memberContext{Name: m.Name, PeerAddr: m.PeerAddr})
	if err != nil {
		return httpapi.JoinInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	added, err := n.rep.ChangeMember(ctx, newRequestID(), replica.AddLearner, id, b, false)
	if err != nil {
		return httpapi.JoinInfo{}, err
	}
	n.logger.Info("added member as learner", "name", m.Name, "id", fmt.Sprintf("%x", id), "peer_addr", m.PeerAddr, "index", added)
	return n.joinInfo(id, added), nil
}

func (n *Node) joinInfo(id replica.NodeID, addedAt uint64) httpapi.JoinInfo {
	st := n.rep.Status()
	rows := n.rows()
	info := httpapi.JoinInfo{ClusterID: strconv.FormatUint(n.ms.ClusterID, 16), ID: strconv.FormatUint(uint64(id), 16), AddedAt: addedAt}
	for _, x := range slices.Concat(st.Voters, st.Learners) {
		r := rows[uint64(x)]
		info.Members = append(info.Members, httpapi.JoinMember{ID: strconv.FormatUint(uint64(x), 16), Name: r.Name, PeerAddr: r.PeerAddr})
	}
	for _, v := range n.ms.bootstrapVoters() {
		info.BootstrapVoters = append(info.BootstrapVoters, strconv.FormatUint(v, 16))
	}
	return info
}

// RemoveMember implements httpapi.Admin.
func (n *Node) RemoveMember(ctx context.Context, name string, force bool) error {
	id := n.idOfName(name)
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	if _, err := n.rep.ChangeMember(ctx, newRequestID(), replica.RemoveMember, id, nil, force); err != nil {
		return err
	}
	n.logger.Info("removed member", "name", name, "id", fmt.Sprintf("%x", id), "forced", force)
	return nil
}

// TransferLeader implements httpapi.Admin.
func (n *Node) TransferLeader(ctx context.Context, to string) (httpapi.MemberInfo, error) {
	var id replica.NodeID
	if to != "" {
		id = n.idOfName(to)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	leader, err := n.rep.TransferLeadership(ctx, id)
	if errors.Is(err, replica.ErrUnknownMember) && to != "" {
		// The replica knows only the ID; the operator typed a name.
		return httpapi.MemberInfo{}, fmt.Errorf("transfer leadership to %q: %w (or it is not a voter)", to, replica.ErrUnknownMember)
	}
	if err != nil {
		return httpapi.MemberInfo{}, err
	}
	info, _ := n.Member(leader)
	if info.Name == "" {
		info.Name = strconv.FormatUint(uint64(leader), 16)
	}
	return info, nil
}

// Healthy implements httpapi.Admin.
func (n *Node) Healthy() map[kv.NodeID]bool {
	p := n.rep.Progress()
	if p == nil {
		return nil
	}
	out := make(map[kv.NodeID]bool, len(p))
	for id, pr := range p {
		if !pr.Unknown {
			out[id] = pr.Active
		}
	}
	return out
}

// joinCluster asks the member at cfg.Join to add this node as a learner and
// saves the cluster it answered with as this node's membership.
func joinCluster(ctx context.Context, cfg config.Config, adv advertised, path string) (*membership, error) {
	body, err := json.Marshal(httpapi.MemberInfo{Name: cfg.Name, PeerAddr: adv.peer, HTTPAddr: adv.http, MemcacheAddr: adv.memcache,
		MaxClusterVersion: command.ClusterVersionMax})
	if err != nil {
		return nil, err
	}
	url := strings.TrimRight(cfg.Join, "/") + "/v1/cluster/members"
	var info httpapi.JoinInfo
	var lastErr error
	// The member may be starting too, or electing: retry for a while.
	deadline := time.Now().Add(max(cfg.RequestTimeout*3, 15*time.Second))
	for time.Now().Before(deadline) {
		info, lastErr = postJoin(ctx, url, body)
		if lastErr == nil {
			break
		}
		var perm *permanentError
		if errors.As(lastErr, &perm) {
			return nil, lastErr
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return nil, fmt.Errorf("join %s: %w", cfg.Join, context.Cause(ctx))
		}
	}
	if lastErr != nil {
		return nil, fmt.Errorf("join %s: %w", cfg.Join, lastErr)
	}
	m := &membership{}
	if m.ClusterID, err = strconv.ParseUint(info.ClusterID, 16, 64); err != nil {
		return nil, fmt.Errorf("join %s: bad cluster id %q", cfg.Join, info.ClusterID)
	}
	for _, x := range info.Members {
		id, err := strconv.ParseUint(x.ID, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("join %s: bad member id %q", cfg.Join, x.ID)
		}
		m.Members = append(m.Members, member{Name: x.Name, ID: id, PeerAddr: x.PeerAddr})
	}
	for _, v := range info.BootstrapVoters {
		id, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("join %s: bad voter id %q", cfg.Join, v)
		}
		m.Bootstrap = append(m.Bootstrap, id)
	}
	if len(m.Bootstrap) == 0 {
		return nil, fmt.Errorf("join %s: the answer names no bootstrap voters", cfg.Join)
	}
	m.AddedAt = info.AddedAt
	m.Self, m.ListenPeerAddr = cfg.Name, cfg.PeerAddr
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(path, b); err != nil {
		return nil, fmt.Errorf("save %s: %w", path, err)
	}
	return m, nil
}

// permanentError is a join refusal that retrying cannot fix.
type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

func postJoin(ctx context.Context, url string, body []byte) (httpapi.JoinInfo, error) {
	var info httpapi.JoinInfo
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return info, &permanentError{err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return info, err
	}
	if resp.StatusCode != http.StatusCreated {
		var e httpapi.Error
		_ = json.Unmarshal(b, &e)
		msg := fmt.Sprintf("%s: %s", resp.Status, e.Error)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return info, &permanentError{msg}
		}
		return info, errors.New(msg)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("decode answer: %w", err)
	}
	return info, nil
}
