package node

import (
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/membership"
	"github.com/kvd-project/kvd/internal/replica"
)

// memberChange turns a committed configuration change into its effect on
// the member table (membership.Change), for fsmAdapter.
func memberChange(cc *replica.ConfChange) *fsm.MemberChange { return membership.Change(cc) }

// Member is the member table's row for id (membership.Controller.Member).
func (n *Node) Member(id kv.NodeID) (httpapi.MemberInfo, bool) { return n.members.Member(id) }
