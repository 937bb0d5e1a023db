package fsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvd-project/kvd/internal/command"
)

// witnessApplies reports whether a witness applies op: only what says who
// the members are and which rules the cluster follows. Items are not a
// witness's business, nor is anything that only changes them.
func witnessApplies(op command.Op) bool {
	return op == command.OpMember || op == command.OpClusterVersion
}

// CheckpointMembers writes into dir (which must not exist) a store that
// holds this one's metadata and no items: what a witness is sent in place
// of a snapshot. It returns the applied index it covers, like Checkpoint.
// Safe from any goroutine.
func (f *FSM) CheckpointMembers(dir string) (uint64, error) {
	f.dbMu.RLock()
	defer f.dbMu.RUnlock()
	if f.db == nil {
		return 0, errNoStore
	}
	snap := f.db.NewSnapshot()
	defer snap.Close()
	out, err := pebble.Open(dir, &pebble.Options{FS: f.opts.FS, FormatMajorVersion: f.db.FormatMajorVersion()})
	if err != nil {
		return 0, fmt.Errorf("checkpoint members into %s: %w", dir, err)
	}
	applied, err := copyMeta(snap, out)
	if cerr := out.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("checkpoint members: close: %w", cerr)
	}
	if err != nil {
		return 0, err
	}
	return applied, nil
}

// copyMeta copies the metadata keys of src into dst, with the item counts
// zeroed (the copy holds no items), flushed so the copy is its files alone.
func copyMeta(src pebble.Reader, dst *pebble.DB) (uint64, error) {
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixMeta}, UpperBound: []byte{prefixMeta + 1}})
	if err != nil {
		return 0, fmt.Errorf("checkpoint members: %w", err)
	}
	b := dst.NewBatch()
	defer b.Close()
	var applied uint64
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		switch string(k) {
		case string(metaItems), string(metaBytes):
			v = make([]byte, 8)
		case string(metaApplied):
			applied = binary.BigEndian.Uint64(v)
		}
		if err := b.Set(k, v, nil); err != nil {
			_ = it.Close()
			return 0, fmt.Errorf("checkpoint members: %w", err)
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, fmt.Errorf("checkpoint members: read: %w", err)
	}
	// Marked, so that a data member never installs it as its state.
	if err := b.Set(metaWitnessCopy, []byte{1}, nil); err != nil {
		return 0, fmt.Errorf("checkpoint members: %w", err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, fmt.Errorf("checkpoint members: write: %w", err)
	}
	if err := dst.Flush(); err != nil {
		return 0, fmt.Errorf("checkpoint members: flush: %w", err)
	}
	return applied, nil
}

// metaWitnessCopy marks a store CheckpointMembers wrote: the metadata of a
// data member's, without its items.
var metaWitnessCopy = []byte{prefixMeta, 'W'}

// isWitnessCopy reports whether db was written by CheckpointMembers.
func isWitnessCopy(db *pebble.DB) (bool, error) {
	_, closer, err := db.Get(metaWitnessCopy)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, closer.Close()
}

// stripItems deletes every item from a witness's store: a snapshot sent by
// a leader that did not know the receiver for a witness carries them all.
func stripItems(db *pebble.DB) error {
	b := db.NewBatch()
	defer b.Close()
	for _, p := range []byte{prefixData, prefixExpiry} {
		if err := b.DeleteRange([]byte{p}, []byte{p + 1}, nil); err != nil {
			return err
		}
	}
	var zero [8]byte
	for _, k := range [][]byte{metaItems, metaBytes} {
		if err := b.Set(k, zero[:], nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	if err := db.Flush(); err != nil {
		return err
	}
	return db.Compact(context.Background(), []byte{prefixData}, []byte{prefixExpiry + 1}, true)
}
