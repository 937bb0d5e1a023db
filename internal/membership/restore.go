package membership

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path/filepath"

	"github.com/kvd-project/kvd/internal/config"
)

// Restored records, in cluster.json, that a cluster was founded from a
// backup (`kvd snapshot restore`, docs/backup.md) rather than empty.
type Restored struct {
	// FromClusterID is the ID of the cluster the backup was taken of.
	FromClusterID uint64 `json:"from_cluster_id"`
	// Index is the raft index the new cluster's log starts after.
	Index uint64 `json:"index"`
	// CRC is the backup file's checksum: with the members, it makes the
	// new cluster's ID.
	CRC uint32 `json:"crc32c"`
}

// restoredID is the ID of a cluster founded from a backup by the members
// whose --initial-cluster gives flagsID. Every member restores the same
// file with the same flags, so all of them derive the same ID, and it is
// not the ID of a cluster founded empty from the same flags: a member
// started with an empty data dir and those flags (which would write its
// own log from index 1) is refused at the transport handshake.
func restoredID(flagsID uint64, r Restored) uint64 {
	h := fnv.New64a()
	var b [8 + 8 + 8 + 4]byte
	binary.BigEndian.PutUint64(b[0:], flagsID)
	binary.BigEndian.PutUint64(b[8:], r.FromClusterID)
	binary.BigEndian.PutUint64(b[16:], r.Index)
	binary.BigEndian.PutUint32(b[24:], r.CRC)
	_, _ = h.Write([]byte("restored:"))
	_, _ = h.Write(b[:])
	return max(h.Sum64(), 1)
}

// CreateRestored writes, into dir, the cluster.json of member cfg.Name of
// a cluster founded from a backup with cfg's --initial-cluster and
// --initial-witnesses, and returns it.
func CreateRestored(cfg config.Config, dir string, r Restored) (*File, error) {
	m, err := fromFlags(cfg)
	if err != nil {
		return nil, err
	}
	found := false
	for _, x := range m.Members {
		found = found || x.Name == cfg.Name
	}
	if !found {
		return nil, fmt.Errorf("initial-cluster does not name this member %q", cfg.Name)
	}
	m.ClusterID = restoredID(m.ClusterID, r)
	m.Self, m.Restored = cfg.Name, &r
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(dir, FileName), b); err != nil {
		return nil, fmt.Errorf("save %s: %w", filepath.Join(dir, FileName), err)
	}
	return m, nil
}

// ClusterID is the ID of this node's cluster (cluster.json).
func (c *Controller) ClusterID() uint64 { return c.file.ClusterID }
