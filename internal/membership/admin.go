package membership

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/replica"
)

// memberContext rides in a configuration change: who the member is. It is
// applied into the replicated member table with the change itself.
type memberContext struct {
	Name     string `json:"name"`
	PeerAddr string `json:"peer_addr"`
	Witness  bool   `json:"witness,omitempty"`
}

// Change turns a committed configuration change into its effect on
// the member table.
func Change(cc *replica.ConfChange) *fsm.MemberChange {
	mc := &fsm.MemberChange{ID: uint64(cc.ID), Remove: cc.Type == replica.RemoveMember}
	if cc.Type == replica.AddLearner {
		var c memberContext
		// A change without a readable context still changes raft's
		// configuration; the member is then known by ID until it publishes.
		if json.Unmarshal(cc.Context, &c) == nil {
			mc.Name, mc.PeerAddr, mc.Witness = c.Name, c.PeerAddr, c.Witness
		}
	}
	return mc
}

// rows returns the member table: the replicated rows over the founding
// members this node's cluster.json names (a founding member has a row only
// once it has published its addresses).
func (c *Controller) rows() map[uint64]fsm.Member {
	out := map[uint64]fsm.Member{}
	for _, m := range c.file.Members {
		out[m.ID] = fsm.Member{ID: m.ID, Name: m.Name, PeerAddr: m.PeerAddr, Witness: m.Witness}
	}
	for _, m := range c.state.Members() {
		prev := out[m.ID]
		if m.Name == "" {
			m.Name = prev.Name
		}
		if m.PeerAddr == "" {
			m.PeerAddr = prev.PeerAddr
		}
		// A founding member's row (written when it publishes) says
		// nothing of its role: cluster.json does. A row written by the
		// change that added a member does, also when the name was a
		// founding witness's, removed and added back as a data member.
		if !m.Witness && !m.Data {
			m.Witness = prev.Witness
		}
		out[m.ID] = m
	}
	return out
}

// Member implements httpapi.Directory.
func (c *Controller) Member(id kv.NodeID) (httpapi.MemberInfo, bool) {
	m, ok := c.rows()[uint64(id)]
	if !ok {
		return httpapi.MemberInfo{}, false
	}
	return httpapi.MemberInfo{Name: m.Name, PeerAddr: m.PeerAddr, HTTPAddr: m.HTTPAddr, MemcacheAddr: m.MemcacheAddr, Witness: m.Witness}, true
}

// DataMembers are the members of the configuration that are not
// witnesses, by name.
func (c *Controller) DataMembers() []httpapi.MemberInfo {
	var out []httpapi.MemberInfo
	st := c.rep.Status()
	rows := c.rows()
	for _, id := range slices.Concat(st.Voters, st.Learners) {
		if m, ok := rows[uint64(id)]; ok && !m.Witness {
			info, _ := c.Member(kv.NodeID(id))
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b httpapi.MemberInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (c *Controller) idOfName(name string) replica.NodeID {
	for id, m := range c.rows() {
		if m.Name == name {
			return replica.NodeID(id)
		}
	}
	return IDOf(name)
}

func newRequestID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return binary.BigEndian.Uint64(b[:]) | 1
}

// AddMember implements httpapi.Admin. Adding a member that is already there
// with the same peer address answers as if it had just been added, so a
// joining node that crashed before saving its membership can retry.
func (c *Controller) AddMember(ctx context.Context, m httpapi.MemberInfo) (httpapi.JoinInfo, error) {
	// A joiner says which versions it applies: one that cannot apply the
	// cluster's is refused here rather than stop later at a state or an
	// entry past its version. kvd cluster add does not say (a member so
	// added stops itself at that point instead), nor can a kvd from before
	// cluster versions, which would apply a snapshot's state by its own
	// rules: do not add one to a cluster past version 1.
	if cv := c.state.ClusterVersion(); m.MaxClusterVersion != 0 && m.MaxClusterVersion < cv {
		return httpapi.JoinInfo{}, fmt.Errorf("%w: %s applies versions up to %d, the cluster is at %d", kv.ErrVersionTooOld, m.Name, m.MaxClusterVersion, cv)
	}
	id := IDOf(m.Name)
	st := c.rep.Status()
	// Only the leader answers from its configuration: a follower's may be
	// behind the member's removal, and ChangeMember passes the request on.
	if st.Role == "leader" && (slices.Contains(st.Voters, id) || slices.Contains(st.Learners, id)) {
		if have, ok := c.rows()[uint64(id)]; ok && have.PeerAddr == m.PeerAddr {
			if have.Witness != m.Witness {
				return httpapi.JoinInfo{}, fmt.Errorf("%w: %s was added as a %s and asks to join as a %s", kv.ErrMemberExists, m.Name, role(have.Witness), role(m.Witness))
			}
			// The status that lists the member was published after its
			// addition was applied: its applied index is at or after it.
			return c.joinInfo(id, st.Applied), nil
		}
		return httpapi.JoinInfo{}, fmt.Errorf("%w: %s", kv.ErrMemberExists, m.Name)
	}
	if m.Witness {
		if cv := c.state.ClusterVersion(); cv < command.ClusterVersionWitness {
			return httpapi.JoinInfo{}, fmt.Errorf("%w: adding a witness needs cluster version %d, the cluster is at %d",
				kv.ErrClusterVersion, command.ClusterVersionWitness, cv)
		}
		if err := c.checkWitnessAdd(st, id); err != nil {
			return httpapi.JoinInfo{}, err
		}
	}
	b, err := json.Marshal(memberContext{Name: m.Name, PeerAddr: m.PeerAddr, Witness: m.Witness})
	if err != nil {
		return httpapi.JoinInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	added, err := c.rep.ChangeMember(ctx, newRequestID(), replica.AddLearner, id, b, false)
	if err != nil {
		return httpapi.JoinInfo{}, err
	}
	c.logger.Info("added member as learner", "name", m.Name, "id", fmt.Sprintf("%x", id), "peer_addr", m.PeerAddr, "index", added)
	return c.joinInfo(id, added), nil
}

func (c *Controller) joinInfo(id replica.NodeID, addedAt uint64) httpapi.JoinInfo {
	st := c.rep.Status()
	rows := c.rows()
	info := httpapi.JoinInfo{ClusterID: strconv.FormatUint(c.file.ClusterID, 16), ID: strconv.FormatUint(uint64(id), 16), AddedAt: addedAt}
	for _, x := range slices.Concat(st.Voters, st.Learners) {
		r := rows[uint64(x)]
		info.Members = append(info.Members, httpapi.JoinMember{ID: strconv.FormatUint(uint64(x), 16), Name: r.Name, PeerAddr: r.PeerAddr, Witness: r.Witness})
	}
	for _, v := range c.file.BootstrapVoters() {
		info.BootstrapVoters = append(info.BootstrapVoters, strconv.FormatUint(v, 16))
	}
	return info
}

func role(witness bool) string {
	if witness {
		return "witness"
	}
	return "data member"
}

// checkWitnessAdd refuses a witness the data members would not outnumber.
// The witness itself is left out of the count: registered already (kvd
// cluster add, then its --join start, answered by a follower that passes
// it on), it is not a second one.
func (c *Controller) checkWitnessAdd(st replica.Status, id replica.NodeID) error {
	data, witnesses := c.countRoles(st, id)
	if witnesses+1 >= data {
		return fmt.Errorf("%w: %d data member(s) and %d witness(es) already; the data members must outnumber the witnesses (add a data member first)",
			kv.ErrWitnessQuorum, data, witnesses)
	}
	return nil
}

// countRoles counts the data members among the voters and the witnesses
// among voters and learners, leaving out except. A data learner is not
// counted (it may never be promoted), a witness learner is (it will be).
func (c *Controller) countRoles(st replica.Status, except replica.NodeID) (data, witnesses int) {
	rows := c.rows()
	for _, id := range st.Voters {
		if id != except && !rows[uint64(id)].Witness {
			data++
		}
	}
	for _, id := range slices.Concat(st.Voters, st.Learners) {
		if id != except && rows[uint64(id)].Witness {
			witnesses++
		}
	}
	return data, witnesses
}

// IsWitness reports whether member id is a witness. The replica asks
// before it hands leadership on or answers a vote request, the transport
// before it sends a snapshot: rare enough to read the table each time.
func (c *Controller) IsWitness(id replica.NodeID) bool {
	return c.rows()[uint64(id)].Witness
}

// RemoveMember implements httpapi.Admin. A data member is not removed while
// that would leave the witnesses as many as the data members.
func (c *Controller) RemoveMember(ctx context.Context, name string, force bool) error {
	id := c.idOfName(name)
	if st := c.rep.Status(); !c.rows()[uint64(id)].Witness {
		if data, witnesses := c.countRoles(st, id); witnesses > 0 && witnesses >= data {
			return fmt.Errorf("%w: removing %s would leave %d data member(s) and %d witness(es); the data members must outnumber the witnesses "+
				"(add a data member, or remove a witness, first)", kv.ErrWitnessQuorum, name, data, witnesses)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	if _, err := c.rep.ChangeMember(ctx, newRequestID(), replica.RemoveMember, id, nil, force); err != nil {
		return err
	}
	c.logger.Info("removed member", "name", name, "id", fmt.Sprintf("%x", id), "forced", force)
	return nil
}

// TransferLeader implements httpapi.Admin.
func (c *Controller) TransferLeader(ctx context.Context, to string) (httpapi.MemberInfo, error) {
	var id replica.NodeID
	if to != "" {
		id = c.idOfName(to)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	leader, err := c.rep.TransferLeadership(ctx, id)
	if errors.Is(err, replica.ErrUnknownMember) && to != "" {
		// The replica knows only the ID; the operator typed a name.
		return httpapi.MemberInfo{}, fmt.Errorf("transfer leadership to %q: %w (or it is not a voter)", to, replica.ErrUnknownMember)
	}
	if err != nil {
		return httpapi.MemberInfo{}, err
	}
	info, _ := c.Member(leader)
	if info.Name == "" {
		info.Name = strconv.FormatUint(uint64(leader), 16)
	}
	return info, nil
}

// Healthy implements httpapi.Admin.
func (c *Controller) Healthy() map[kv.NodeID]bool {
	p := c.rep.Progress()
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
