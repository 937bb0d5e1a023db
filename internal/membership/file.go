package membership

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/replica"
)

// IDOf derives a member's raft ID from its name: stable across restarts and
// identical on every member that reads the same --initial-cluster.
func IDOf(name string) replica.NodeID {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	if id := h.Sum64(); id != 0 {
		return replica.NodeID(id)
	}
	return 1
}

// File is how this node's cluster began, kept in
// <data-dir>/cluster.json so that a restart needs no --initial-cluster (and
// ignores a different one): the cluster ID, the founding members' addresses,
// and for a member that joined later the voters the log starts from. It is
// written once; later changes live in the replicated member table.
type File struct {
	ClusterID uint64       `json:"cluster_id"`
	Members   []FileMember `json:"members"`
	// Bootstrap is the voter set the cluster's log starts from, for a member
	// that joined later (founding members: the IDs of Members).
	Bootstrap []uint64 `json:"bootstrap_voters,omitempty"`
	// AddedAt, for a member that joined later, is a raft index at or
	// after the change that added it (0: unknown, a join answered by an
	// older kvd). See removal.go.
	AddedAt uint64 `json:"added_at,omitempty"`
	// Self is the --name this data dir was started under. A member's raft
	// ID is derived from its name, so the log and the state belong to it:
	// started under another name, the node would be a stranger to its own
	// cluster, never ready. Empty in a file written by an older kvd.
	Self string `json:"self,omitempty"`
	// ListenPeerAddr is the --peer-addr of the start that wrote the file.
	// A founding member advertises its --initial-cluster entry, which
	// describes that listener; once --peer-addr changes, the entry no
	// longer does (see File.Advertise). Empty in a file written by an older kvd.
	ListenPeerAddr string `json:"listen_peer_addr,omitempty"`
	// Witness is whether this data dir is a witness's: its role is fixed
	// at the first start, like its name (node checks the data dir agrees).
	Witness bool `json:"witness,omitempty"`
	// Restored is set when the cluster was founded from a backup
	// (restore.go): its ID is derived from the backup's as well.
	Restored *Restored `json:"restored,omitempty"`
	// Forced lists the starts with --force-new-cluster that made this
	// member the only voter (forcenew.go), oldest first. Unlike the rest
	// of the file it is appended to after the first start.
	Forced []ForcedRecord `json:"forced_new_cluster,omitempty"`
}

// checkSelf reports why this data dir cannot be started as member name:
// it was started under another one.
func (m *File) checkSelf(name, path string) error {
	owner := m.Self
	if owner == "" && len(m.Bootstrap) == 0 && len(m.Members) > 0 &&
		!slices.ContainsFunc(m.Members, func(x FileMember) bool { return x.Name == name }) {
		// An older file of a founding member: the member is one of the
		// founders (which one is not recorded).
		names := make([]string, 0, len(m.Members))
		for _, x := range m.Members {
			names = append(names, x.Name)
		}
		return fmt.Errorf("%s: the data dir belongs to one of the founding members %s, not to %q: "+
			"a member's name is its raft ID and cannot change; start it under its own --name, or give %q an empty data dir",
			path, strings.Join(names, ", "), name, name)
	}
	if owner != "" && owner != name {
		return fmt.Errorf("%s: the data dir belongs to member %q, not to %q: "+
			"a member's name is its raft ID and cannot change; start it with --name %s, or give %q an empty data dir",
			path, owner, name, owner, name)
	}
	return nil
}

// BootstrapVoters are the voters the cluster's log starts from.
func (m *File) BootstrapVoters() []uint64 {
	if len(m.Bootstrap) > 0 {
		return m.Bootstrap
	}
	out := make([]uint64, 0, len(m.Members))
	for _, x := range m.Members {
		out = append(out, x.ID)
	}
	return out
}

// FileMember is one member as cluster.json names it.
type FileMember struct {
	Name     string `json:"name"`
	ID       uint64 `json:"id"`
	PeerAddr string `json:"peer_addr"`
	// Witness marks a witness (docs/witness.md).
	Witness bool `json:"witness,omitempty"`
}

// FileName is the membership file's name in the data dir.
const FileName = "cluster.json"

// Load returns the membership saved in dataDir, or, on first
// start (fresh is true), the one --initial-cluster describes, saved.
func Load(cfg config.Config, fresh bool) (*File, error) {
	path := filepath.Join(cfg.DataDir, FileName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		m, err := parse(b, path)
		if err != nil {
			return nil, err
		}
		if err := m.checkSelf(cfg.Name, path); err != nil {
			return nil, err
		}
		return m, nil
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
	m.Self, m.ListenPeerAddr = cfg.Name, cfg.PeerAddr
	b, err = json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(path, b); err != nil {
		return nil, fmt.Errorf("save %s: %w", path, err)
	}
	return m, nil
}

// damagedAdvice ends the error for a cluster.json kvd cannot use. kvd
// writes the file once, atomically, so it was damaged from outside, and
// rewriting it from flags could give the member the wrong cluster.
const damagedAdvice = "kvd writes it once, at the first start, and never partially: " +
	"restore it from a backup, or give the member an empty data dir and add it to the cluster again"

// parse reads the contents of cluster.json. Every file kvd writes
// names at least one member (a founding member's --initial-cluster) or one
// bootstrap voter (a joined member's): one that names neither, "{}" or
// "null" say, would start a node that knows none of its peers.
func parse(b []byte, path string) (*File, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("%s is empty: %s", path, damagedAdvice)
	}
	var m File
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s is damaged (%w): %s", path, err, damagedAdvice)
	}
	if len(m.Members) == 0 && len(m.Bootstrap) == 0 {
		return nil, fmt.Errorf("%s names no members and no bootstrap voters: %s", path, damagedAdvice)
	}
	return &m, nil
}

func fromFlags(cfg config.Config) (*File, error) {
	ms, err := cfg.Members()
	if err != nil {
		return nil, err
	}
	witnesses, err := cfg.Witnesses(ms)
	if err != nil {
		return nil, err
	}
	if cfg.IsWitness() && !witnesses[cfg.Name] {
		// A witness founding a cluster the others do not know it a witness
		// in, or one of its own, which it would lead with no data: every
		// member must be given the same --initial-witnesses.
		return nil, fmt.Errorf("witness: a founding witness must be named in --initial-witnesses (the same list on every member), " +
			"with at least two data members in --initial-cluster; a witness joining a running cluster gives --join")
	}
	m := &File{Witness: cfg.IsWitness()}
	h := fnv.New64a()
	for _, x := range ms {
		m.Members = append(m.Members, FileMember{Name: x.Name, ID: uint64(IDOf(x.Name)), PeerAddr: x.PeerAddr, Witness: witnesses[x.Name]})
		fmt.Fprintf(h, "%s=%s,", x.Name, x.PeerAddr)
		if witnesses[x.Name] {
			// Two clusters founded from the same members but with other
			// witnesses disagree on who holds data: keep them apart.
			fmt.Fprintf(h, "witness,")
		}
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
