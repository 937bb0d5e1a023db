package fsm

import (
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
	// Keys counts every stored key (items, expiry index, metadata).
	Keys uint64 `json:"keys"`
	// Sum is the hex SHA-256 of every key and value in key order.
	Sum string `json:"sum"`
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
