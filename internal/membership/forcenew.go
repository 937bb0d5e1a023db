package membership

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// ForcedRecord records, in cluster.json, one start with --force-new-cluster
// (docs/backup.md, "Disaster recovery") that made this member the only
// voter of its cluster: an operator reading the data dir later learns the
// cluster went through a recovery that may have lost writes, and when.
// The cluster ID stays: members join the recovered cluster through this
// one and take it from the answer, and the members it removed are refused
// by every member's transport once the removals are applied.
type ForcedRecord struct {
	// At is the wall time of the start, RFC 3339, for the operator only.
	At string `json:"at"`
	// Index and Term are where the log's appended removals end: the
	// log was committed up to Index by this member alone.
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// Removed names the members removed (by name where this member knew
	// it, else the raft ID in hex).
	Removed []string `json:"removed"`
	// Uncommitted is how many entries this member held without knowing
	// them committed, and committed then.
	Uncommitted uint64 `json:"uncommitted_entries"`
}

// RecordForced appends r to m and rewrites cluster.json in dataDir,
// atomically.
func RecordForced(dataDir string, m *File, r ForcedRecord) error {
	m.Forced = append(m.Forced, r)
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, FileName)
	if err := writeFileSync(path, b); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}
