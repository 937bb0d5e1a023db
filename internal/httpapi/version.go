package httpapi

import (
	"net/http"
	"strconv"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/version"
)

// VersionInfo is GET /v1/version: this node's release and the cluster
// versions (command.ClusterVersionMax). The leader reads every member's
// MaxClusterVersion to decide when the cluster may move to a new version;
// a member that answers 404 (a kvd from before cluster versions) applies
// version 1 only.
type VersionInfo struct {
	Version string `json:"version"`
	// ID is this member's raft ID (hex): the leader checks that the
	// address it asked is still that member's.
	ID string `json:"id"`
	// ClusterVersion is the replicated cluster version as of this node's
	// applied index.
	ClusterVersion uint64 `json:"cluster_version"`
	// MaxClusterVersion is the highest cluster version this binary applies.
	MaxClusterVersion uint64 `json:"max_cluster_version"`
}

func (a *api) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, VersionInfo{
		Version:           version.Version,
		ID:                strconv.FormatUint(uint64(a.svc.Status().ID), 16),
		ClusterVersion:    a.svc.StoreStats().ClusterVersion,
		MaxClusterVersion: command.ClusterVersionMax,
	})
}
