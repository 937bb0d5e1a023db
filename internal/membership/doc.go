// Package membership is kvd's membership control plane: who the members of
// this node's cluster are and how that changes. It owns
//
//   - cluster.json, how the cluster began: written at the first start from
//     --initial-cluster, or from the answer of the member a new node joins
//     through (file.go, join.go);
//   - the member table as this node sees it: the founding members over the
//     replicated rows, published into the log by each member (Member);
//   - the peer transport's lifecycle and its peers kept equal to raft's
//     configuration, including a leader's address learned from other
//     members when neither knows it (peers.go, leaderaddr.go);
//   - membership operations: add, remove, leadership transfer (admin.go,
//     httpapi's Admin and Directory);
//   - this member's removal, noticed however it happened (removal.go);
//   - raising the cluster version once every member applies it
//     (version.go).
//
// It asks the raft member and the state machine through the small
// interfaces Replica, State and Proposer, which node fills with the replica,
// the fsm and the kv service. node builds a Controller once the replica is
// built; the Controller is the replica's sender, so that a group of one
// binds no peer port until a member is added. Run, on a goroutine of its
// own, does the watching; the HTTP handlers call the operations from
// theirs.
package membership
