package kv

import (
	"context"
	"errors"

	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/replica"
)

// Scanner is the state machine's ordered listing (fsm.FSM implements it). It
// is separate from Store so stores without ordered keys stay valid Stores.
type Scanner interface {
	Scan(prefix, after []byte, limit int, nowNs int64) ([]fsm.ScanItem, error)
}

// ErrListUnsupported is returned by List when the store cannot list keys.
var ErrListUnsupported = errors.New("this store cannot list keys")

// List returns, in key order, up to limit items whose key starts with prefix
// and sorts after after, as of now. At Linearizable it takes a read barrier
// first, so the listing reflects every write acknowledged before the call.
// A listing is one consistent snapshot of this node's state; pages fetched
// with successive after values are each consistent, not the whole walk.
func (s *Service) List(ctx context.Context, level Consistency, prefix, after []byte, limit int) ([]fsm.ScanItem, error) {
	sc, ok := s.store.(Scanner)
	if !ok {
		return nil, ErrListUnsupported
	}
	if err := s.Barrier(ctx, level); err != nil {
		return nil, err
	}
	return sc.Scan(prefix, after, limit, s.now().UnixNano())
}

// More of the vocabulary the HTTP listener needs, re-exported like Result and
// Item so that listeners import kv only.
type (
	// ScanItem is one item of a listing: key and metadata, no value.
	ScanItem = fsm.ScanItem
	// StoreStats are the state store's counters.
	StoreStats = fsm.Stats
	// ReplicaStatus is the node's raft state.
	ReplicaStatus = replica.Status
	// NodeID identifies a member of the raft group.
	NodeID = replica.NodeID
)
