package kv

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/replica"
)

// Scanner is the state machine's ordered listing (fsm.FSM implements it). It
// is separate from Store so stores without ordered keys stay valid Stores.
type Scanner interface {
	// ScanPage examines a bounded number of items after after and returns
	// the visible ones (up to limit) and next, where to resume (nil at the
	// end of the range); see fsm.FSM.ScanPage.
	ScanPage(prefix, after []byte, limit int, nowNs int64) (items []command.ScanItem, next []byte, err error)
}

// ErrListUnsupported is returned by List when the store cannot list keys.
var ErrListUnsupported = errors.New("this store cannot list keys")

// List returns, in key order, up to limit items whose key starts with prefix
// and sorts after after, as of now. At Linearizable it takes a read barrier
// first, so the listing reflects every write acknowledged before the call.
//
// It follows ListPage's cursor until it has limit items or reaches the end
// of the range, so its work is not bounded by limit (hidden items between
// visible ones cost a step each); it stops with ctx's error once ctx ends.
// Each step reads one consistent snapshot of this node's state and holds
// the store's lock for that step only; a listing of several steps may
// combine snapshots (each after the barrier, so every item is still as new
// as a linearizable read).
func (s *Service) List(ctx context.Context, level Consistency, prefix, after []byte, limit int) ([]command.ScanItem, error) {
	sc, ok := s.store.(Scanner)
	if !ok {
		return nil, ErrListUnsupported
	}
	if err := s.Barrier(ctx, level); err != nil {
		return nil, err
	}
	limit = min(limit, fsm.MaxScanLimit)
	nowNs := s.now().UnixNano() // one clock for the whole listing
	var out []command.ScanItem
	for len(out) < limit {
		items, next, err := sc.ScanPage(prefix, after, limit-len(out), nowNs)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if next == nil || len(out) >= limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("list %q after %q: %w", prefix, next, err)
		}
		after = next
	}
	return out, nil
}

// The node's reports that listeners hand on (stats, the cluster view), named
// here so that they import kv only: kv is their one door to the node.
type (
	// StoreStats are the state store's counters (fsm.Stats).
	StoreStats = fsm.Stats
	// ReplicaStatus is the node's raft state.
	ReplicaStatus = replica.Status
	// NodeID identifies a member of the raft group.
	NodeID = replica.NodeID
)
