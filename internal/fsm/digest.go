package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Digest is a fingerprint of the whole state at one applied index. Apply is
// deterministic, so every replica that has applied the same index holds the
// same state and must report the same Sum: tests and operators compare them
// to prove replicas did not diverge.
type Digest struct {
	Applied uint64 `json:"applied"`
	// Keys counts every stored key (items, expiry index, metadata), but
	// for metadata at the value its absence stands for (metaDefaults).
	Keys uint64 `json:"keys"`
	// Sum is the hex SHA-256 of every key and value Keys counts, in key
	// order.
	Sum string `json:"sum"`
}

// metaDefaults are metadata keys whose absence stands for a value, with
// that value. Apply writes metaFlushedBefore and metaClusterVersion only in
// a batch that changes them, and raft hands each node the same entries in
// batches of its own: a node may hold such a key at its default (one batch
// moved it away, a later one back, as a delayed flush_all replacing a
// passed one and then an immediate flush_all do) where a node that applied
// both in one batch never wrote it. That is the same state, which Digest
// must hash alike, so a key at its default is hashed as absent.
var metaDefaults = []struct {
	key []byte
	v   uint64
}{
	{metaFlushedBefore, 0},
	{metaClusterVersion, 1},
	{metaFlushAt, 0},
}

// isMetaDefault reports whether key and v are a metaDefaults key at its
// default.
func isMetaDefault(key, v []byte) bool {
	if len(v) != 8 {
		return false
	}
	for _, d := range metaDefaults {
		if bytes.Equal(key, d.key) {
			return binary.BigEndian.Uint64(v) == d.v
		}
	}
	return false
}

// Digest reads a consistent snapshot of the store (the applied index comes
// from the same snapshot as the data). It reads everything: an
// operator-triggered check, not a hot path.
func (f *FSM) Digest() (Digest, error) {
	// Held throughout: an InstallSnapshot closing the store under an open
	// Pebble snapshot would fail (and stop the node).
	f.dbMu.RLock()
	defer f.dbMu.RUnlock()
	if f.db == nil {
		return Digest{}, errors.New("digest: state store is closed")
	}
	snap := f.db.NewSnapshot()
	defer snap.Close()

	var d Digest
	v, closer, err := snap.Get(metaApplied)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return Digest{}, fmt.Errorf("digest: read applied index: %w", err)
	default:
		if len(v) == 8 {
			d.Applied = binary.BigEndian.Uint64(v)
		}
		closer.Close()
	}
	it, err := snap.NewIter(nil)
	if err != nil {
		return Digest{}, fmt.Errorf("digest: %w", err)
	}
	defer it.Close()
	h := sha256.New()
	var n [8]byte
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr() // Value() hides a failed read as nil
		if err != nil {
			return Digest{}, fmt.Errorf("digest: read %q: %w", it.Key(), err)
		}
		if isMetaDefault(it.Key(), v) {
			continue
		}
		// Length-prefixed, so no two different states hash the same bytes.
		for _, b := range [][]byte{it.Key(), v} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
		d.Keys++
	}
	if err := it.Error(); err != nil {
		return Digest{}, fmt.Errorf("digest: %w", err)
	}
	d.Sum = fmt.Sprintf("%x", h.Sum(nil))
	return d, nil
}
