package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvd-project/kvd/internal/replica"
	"github.com/kvd-project/kvd/internal/transport"
)

// A witness's data dir holds the raft log (raft/) and, in witness/, the
// little state a witness keeps (member table, cluster version, applied
// index); a data member's holds state/. Which one a dir holds is its role,
// fixed at its first start.
const (
	dataStoreDir    = "state"
	witnessStoreDir = "witness"
	// witnessCacheBytes is the witness's Pebble block cache: its store
	// is a few keys.
	witnessCacheBytes = 1 << 20
	// witnessSegmentBytes sizes a witness's raft log segments (a data
	// member's are 64 MiB): 4 MiB hold some 100,000 of its entries.
	witnessSegmentBytes = 4 << 20
)

func storeDir(witness bool) string {
	if witness {
		return witnessStoreDir
	}
	return dataStoreDir
}

// checkRole refuses a data dir whose store belongs to the other role: a
// witness started on a data member's dir would drop its data at the next
// snapshot, and a data member started on a witness's would serve a store
// that holds no items as if it held them all.
func checkRole(dataDir string, witness bool) error {
	other := storeDir(!witness)
	if _, err := os.Stat(filepath.Join(dataDir, other)); err == nil {
		return roleMismatch(dataDir, !witness)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("check data dir %s: %w", dataDir, err)
	}
	return nil
}

func roleMismatch(dataDir string, dirIsWitness bool) error {
	if dirIsWitness {
		return fmt.Errorf("data dir %s belongs to a witness, which holds no data: start it as one (--witness, or its name in --initial-witnesses), "+
			"or give this data member an empty data dir", dataDir)
	}
	return fmt.Errorf("data dir %s belongs to a data member: a witness needs an empty data dir of its own "+
		"(or start this one without --witness and without its name in --initial-witnesses)", dataDir)
}

// witnessRefusal is, on a witness, what its listeners answer a data
// request with: the data members to send it to (nil on a data member).
func (n *Node) witnessRefusal(witness, http bool) func() string {
	if !witness {
		return nil
	}
	return func() string {
		var to []string
		for _, m := range n.members.DataMembers() {
			addr := m.MemcacheAddr
			if http {
				addr = m.HTTPAddr
			}
			if addr == "" {
				// Published shortly after it starts; until then, where it is.
				addr = "its client addresses not published yet; peer address " + m.PeerAddr
			}
			to = append(to, fmt.Sprintf("%s (%s)", m.Name, addr))
		}
		return "this member is a witness and holds no data: send data requests to a data member: " + strings.Join(to, ", ")
	}
}

// snapshotSource checkpoints the state store for the transport: the whole
// store for a data member, its metadata alone for a witness.
type snapshotSource struct{ n *Node }

func (s snapshotSource) Checkpoint(dir string, to transport.NodeID) (uint64, error) {
	if s.n.members.IsWitness(replica.NodeID(to)) {
		return s.n.state.CheckpointMembers(dir)
	}
	return s.n.state.Checkpoint(dir)
}
