package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/kvd-project/kvd/internal/config"
)

// membership is how this node's cluster began, kept in
// <data-dir>/cluster.json so that a restart needs no --initial-cluster (and
// ignores a different one): the cluster ID, the founding members' addresses,
// and for a member that joined later the voters the log starts from. It is
// written once; later changes live in the replicated member table.
type membership struct {
	ClusterID uint64   `json:"cluster_id"`
	Members   []member `json:"members"`
	// Bootstrap is the voter set the cluster's log starts from, for a member
	// that joined later (founding members: the IDs of Members).
	Bootstrap []uint64 `json:"bootstrap_voters,omitempty"`
	// AddedAt, for a member that joined later, is a raft index at or
	// after the change that added it (0: unknown, a join answered by an
	// older kvd). See removal.go.
	AddedAt uint64 `json:"added_at,omitempty"`
}

func (m *membership) bootstrapVoters() []uint64 {
	if len(m.Bootstrap) > 0 {
		return m.Bootstrap
	}
	out := make([]uint64, 0, len(m.Members))
	for _, x := range m.Members {
		out = append(out, x.ID)
	}
	return out
}

type member struct {
	Name     string `json:"name"`
	ID       uint64 `json:"id"`
	PeerAddr string `json:"peer_addr"`
}

const membershipFile = "cluster.json"

// loadMembership returns the membership saved in dataDir, or, on first
// start (fresh is true), the one --initial-cluster describes, saved.
func loadMembership(cfg config.Config, fresh bool) (*membership, error) {
	path := filepath.Join(cfg.DataDir, membershipFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		var m membership
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return &m, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read %s: %w", path, err)
	case !fresh:
		// A data dir from a single-node start before this file existed.
		return fromFlags(cfg)
	}
	m, err := fromFlags(cfg)
	if err != nil {
		return nil, err
	}
	b, err = json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(path, b); err != nil {
		return nil, fmt.Errorf("save %s: %w", path, err)
	}
	return m, nil
}

func fromFlags(cfg config.Config) (*membership, error) {
	ms, err := cfg.Members()
	if err != nil {
		return nil, err
	}
	m := &membership{}
	h := fnv.New64a()
	for _, x := range ms {
		m.Members = append(m.Members, member{Name: x.Name, ID: uint64(IDOf(x.Name)), PeerAddr: x.PeerAddr})
		fmt.Fprintf(h, "%s=%s,", x.Name, x.PeerAddr)
	}
	sort.Slice(m.Members, func(i, j int) bool { return m.Members[i].Name < m.Members[j].Name })
	// Nodes bootstrapped from the same --initial-cluster share an ID; a node
	// of another cluster is refused at the transport handshake.
	m.ClusterID = h.Sum64()
	return m, nil
}

func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
