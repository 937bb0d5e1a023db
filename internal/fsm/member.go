package fsm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvd-project/kvd/internal/command"
)

// Member is one row of the replicated member table: who a raft member is and
// where to reach it. Raft's configuration says which IDs vote; this table,
// written by the same log and shipped in the same snapshots, says what those
// IDs are called and where they listen, so a node that catches up by snapshot
// learns the addresses of members added while it was away.
type Member struct {
	ID           uint64 `json:"id"`
	Name         string `json:"name"`
	PeerAddr     string `json:"peer_addr"`
	HTTPAddr     string `json:"http_addr,omitempty"`
	MemcacheAddr string `json:"memcache_addr,omitempty"`
	// Witness marks a witness: a voter that holds no data
	// (docs/witness.md). Data marks a member added as a data member. Both
	// are set by the configuration change that added the member, from
	// cluster version 6 on; a founding member's row has neither, and its
	// role is what cluster.json says.
	Witness bool `json:"witness,omitempty"`
	Data    bool `json:"data,omitempty"`
}

func memberKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), metaMember...), id)
}

func loadMember(r pebble.Reader, id uint64) (Member, bool, error) {
	v, closer, err := r.Get(memberKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return Member{}, false, nil
	}
	if err != nil {
		return Member{}, false, err
	}
	defer closer.Close()
	var m Member
	if err := json.Unmarshal(v, &m); err != nil {
		return Member{}, false, fmt.Errorf("member %x: %w", id, err)
	}
	return m, true, nil
}

func storeMember(b *pebble.Batch, m Member) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return b.Set(memberKey(m.ID), v, nil)
}

func (f *FSM) applyMemberChange(b *pebble.Batch, c *MemberChange, clusterVersion uint64) error {
	if c.Remove {
		return b.Delete(memberKey(c.ID), nil)
	}
	m, _, err := loadMember(b, c.ID)
	if err != nil {
		return err
	}
	m.ID = c.ID
	if c.Name != "" {
		m.Name = c.Name
	}
	if c.PeerAddr != "" {
		m.PeerAddr = c.PeerAddr
	}
	if c.Name != "" && clusterVersion >= command.ClusterVersionWitness {
		// An add (a promotion names nobody, and keeps what the row says):
		// a name removed and added back takes the role it is added in.
		m.Witness, m.Data = c.Witness, !c.Witness
	}
	return storeMember(b, m)
}

// applyMemberAttrs records what a member published about itself. A member
// the table does not hold yet (a founding member, known to raft from the
// bootstrap configuration) gets a row; removed members publish nothing that
// could resurrect them because the proposer checks membership first, and a
// stale publish that races a removal leaves only an address row for an ID
// raft no longer lists, which readers ignore.
func (f *FSM) applyMemberAttrs(b *pebble.Batch, a *command.MemberAttrs) (command.Result, error) {
	m, _, err := loadMember(b, a.ID)
	if err != nil {
		return command.Result{}, err
	}
	m.ID = a.ID
	for _, kv := range []struct {
		dst *string
		v   string
	}{{&m.Name, a.Name}, {&m.PeerAddr, a.PeerAddr}, {&m.HTTPAddr, a.HTTPAddr}, {&m.MemcacheAddr, a.MemcacheAddr}} {
		if kv.v != "" {
			*kv.dst = kv.v
		}
	}
	if err := storeMember(b, m); err != nil {
		return command.Result{}, err
	}
	return command.Result{Status: command.StatusStored}, nil
}

// memberTable is the cached member table and the applied index it is the
// table of, published together: raft's configuration reaches Status only
// after the Ready that applied a change, and a reader pairing the two needs
// to know which one is older (MembersAt).
type memberTable struct {
	rows []Member
	at   uint64
}

// Members returns the member table in ID order (a copy: callers may keep it).
func (f *FSM) Members() []Member {
	rows, _ := f.MembersAt()
	return rows
}

// MembersAt returns the member table in ID order (a copy) and the applied
// index it is current as of: every entry up to that index is reflected in
// it. A caller pairing it with raft's configuration (replica Status) must
// see a Status applied at least that far, or a member the table lists may
// be missing from the configuration it reads.
func (f *FSM) MembersAt() ([]Member, uint64) {
	if p := f.members.Load(); p != nil {
		return append([]Member(nil), p.rows...), p.at
	}
	return nil, 0
}

// loadMembers reads the member table from the store into the cache, as of
// applied index at. Callers own f.db for the duration: Open, Apply (the
// Ready loop) and InstallSnapshot (under the write lock).
func (f *FSM) loadMembers(at uint64) error {
	out, err := readMembers(f.db)
	if err != nil {
		return err
	}
	f.members.Store(&memberTable{rows: out, at: at})
	return nil
}

// MemberTableSum fingerprints the member table rows a leader reads the
// addresses to ask from (command.Command.MemberTable): each row's ID,
// name, peer and HTTP address, in the order given (Members' ID order).
// Never 0.
func MemberTableSum(ms []Member) uint64 {
	h := fnv.New64a()
	var n [8]byte
	for _, m := range ms {
		binary.BigEndian.PutUint64(n[:], m.ID)
		h.Write(n[:])
		for _, f := range []string{m.Name, m.PeerAddr, m.HTTPAddr} {
			binary.BigEndian.PutUint64(n[:], uint64(len(f)))
			h.Write(n[:])
			h.Write([]byte(f))
		}
	}
	return max(h.Sum64(), 1)
}

// readMembers reads the member table through r (apply's batch: what the
// entries before this one in the batch changed included), in ID order.
func readMembers(r pebble.Reader) ([]Member, error) {
	upper := append(append([]byte(nil), metaMember...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: metaMember, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("read member table: %w", err)
	}
	defer it.Close()
	var out []Member
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("read member table: %w", err)
		}
		var m Member
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, fmt.Errorf("read member table: %w", err)
		}
		out = append(out, m)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("read member table: %w", err)
	}
	return out, nil
}
