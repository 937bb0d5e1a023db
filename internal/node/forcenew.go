package node

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/membership"
	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/replica"
)

// errForceEmpty refuses --force-new-cluster on a data dir that holds no
// member: there is nothing to recover, and founding a cluster from flags
// is what a start without the flag does.
var errForceEmpty = errors.New("force-new-cluster: the data dir holds no raft log: " +
	"the flag recovers a surviving member of a cluster that lost its quorum, from that member's data dir; " +
	"to found a new cluster start without it, to rebuild one from a backup use kvd snapshot restore")

// forceNewCluster makes this member the only voter of its cluster before
// the replica starts (replica.ForceNewCluster; docs/backup.md, "Disaster
// recovery"), warns loudly of what that may lose, and records it in
// cluster.json. The caller has checked the log is not empty. A member
// that is already the only voter, with its whole log committed, is left
// as it is, with a warning: the flag is a one-time action (a forced start
// that crashed before it applied the change finds it done), and one left
// in a unit or a config file must not go unnoticed, because once other
// members have joined, the next start with it removes them.
func forceNewCluster(cfg config.Config, l *raftlog.Log, ms *membership.File, state *fsm.FSM, logger *slog.Logger) error {
	if ms.Witness {
		return errors.New("force-new-cluster: this data dir is a witness's, which holds no data to found a cluster on: " +
			"force a data member, then join a new witness to it")
	}
	forced, err := replica.ForceNewCluster(l, IDOf(cfg.Name))
	if err != nil {
		return err
	}
	if forced.Index == 0 {
		logger.Warn("force-new-cluster: this member is already the only voter of its cluster; nothing to do. "+
			"Remove the flag: once other members have joined, a start with it would remove them",
			"name", cfg.Name)
		return nil
	}
	names := map[uint64]string{}
	for _, m := range ms.Members {
		names[m.ID] = m.Name
	}
	for _, m := range state.Members() {
		if m.Name != "" {
			names[m.ID] = m.Name
		}
	}
	removed := make([]string, 0, len(forced.Removed))
	for _, id := range forced.Removed {
		name := names[uint64(id)]
		if name == "" {
			name = strconv.FormatUint(uint64(id), 16)
		}
		removed = append(removed, name)
	}
	logger.Warn("FORCE-NEW-CLUSTER: this member is now the only voter of its cluster; the members removed must never be started again with their old data dirs",
		"name", cfg.Name, "removed", removed, "promoted_from_learner", forced.Promoted, "commit", forced.Index, "term", forced.Term)
	logger.Warn("FORCE-NEW-CLUSTER: writes the lost members committed that never reached this member are lost for good",
		"applied_before", state.AppliedIndex())
	if forced.Uncommitted > 0 {
		logger.Warn("FORCE-NEW-CLUSTER: entries this member held without knowing them committed are committed now: "+
			"writes whose clients were told the outcome is unknown may appear",
			"entries", forced.Uncommitted)
	}
	logger.Warn("FORCE-NEW-CLUSTER: add members with kvd serve --join and an empty data dir, then remove --force-new-cluster from this member's flags or config")
	rec := membership.ForcedRecord{At: time.Now().UTC().Format(time.RFC3339), Index: forced.Index, Term: forced.Term,
		Removed: removed, Uncommitted: forced.Uncommitted}
	if err := membership.RecordForced(cfg.DataDir, ms, rec); err != nil {
		// The log is forced already; the record only informs.
		return fmt.Errorf("force-new-cluster: record it in cluster.json: %w", err)
	}
	return nil
}
