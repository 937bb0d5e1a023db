package httpapi

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/kvd-project/kvd/internal/kv"
)

// ClusterStatus is the body of GET /v1/cluster: this node's view of the raft
// group. Member IDs are hex strings (as in the logs): a 64-bit ID does not
// survive a JavaScript number.
type ClusterStatus struct {
	// Self is this node's ID.
	Self string `json:"self"`
	// Leader is the leader's ID, "" when this node knows none.
	Leader           string          `json:"leader"`
	HasLeader        bool            `json:"has_leader"`
	Ready            bool            `json:"ready"`
	Term             uint64          `json:"term"`
	Commit           uint64          `json:"commit"`
	Applied          uint64          `json:"applied"`
	LeaderChanges    uint64          `json:"leader_changes"`
	PendingProposals int             `json:"pending_proposals"`
	Members          []ClusterMember `json:"members"`
}

// ClusterMember is one member as this node sees it. Name and addresses come
// from the replicated member table and are left out while unknown (a
// member's HTTP and memcache addresses appear once it has published them).
type ClusterMember struct {
	ID string `json:"id"`
	MemberInfo
	// Kind is voter or learner.
	Kind string `json:"kind"`
	// Role is leader, follower, candidate, pre-candidate (this node's own
	// raft state) or learner.
	Role string `json:"role"`
	Self bool   `json:"self"`
	// Health is healthy, unhealthy or unknown. This node knows its own
	// health (ready or not); the leader knows which members answered within
	// an election timeout over a connection that is still up, once it has
	// led for an election timeout (before that, those it has not heard from
	// yet are unknown); a follower knows only the leader it follows (it
	// forgets its leader after an election timeout without heartbeats) and
	// reports the others as unknown.
	Health string `json:"health"`
}

func formatID(id kv.NodeID) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(id), 16)
}

func (a *api) clusterStatus() ClusterStatus {
	st := a.svc.Status()
	cs := ClusterStatus{
		Self: formatID(st.ID), Leader: formatID(st.Leader), HasLeader: st.Leader != 0,
		Ready: st.Ready, Term: st.Term, Commit: st.Commit, Applied: st.Applied,
		LeaderChanges: st.LeaderChanges, PendingProposals: st.Pending,
		Members: make([]ClusterMember, 0, len(st.Voters)+len(st.Learners)),
	}
	// The leader knows who answers; a follower knows only itself and its leader.
	var healthy map[kv.NodeID]bool
	if a.opts.Admin != nil {
		healthy = a.opts.Admin.Healthy()
	}
	add := func(id kv.NodeID, kind string) {
		m := ClusterMember{ID: formatID(id), Kind: kind, Self: id == st.ID, Health: "unknown"}
		switch {
		case m.Self:
			m.MemberInfo = a.opts.Self
			m.Role = st.Role
			if st.Ready {
				m.Health = "healthy"
			} else {
				m.Health = "unhealthy"
			}
		case id == st.Leader:
			m.Role = "leader"
			m.Health = "healthy"
		case kind == "learner":
			m.Role = "learner"
		default:
			m.Role = "follower"
		}
		if h, known := healthy[id]; !m.Self && known {
			m.Health = "unhealthy"
			if h {
				m.Health = "healthy"
			}
		}
		if !m.Self && a.opts.Directory != nil {
			if info, ok := a.opts.Directory.Member(id); ok {
				m.MemberInfo = info
			}
		}
		cs.Members = append(cs.Members, m)
	}
	voters, learners := slices.Clone(st.Voters), slices.Clone(st.Learners)
	slices.Sort(voters)
	slices.Sort(learners)
	for _, id := range voters {
		add(id, "voter")
	}
	for _, id := range learners {
		add(id, "learner")
	}
	return cs
}

func (a *api) cluster(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.clusterStatus())
}
