package kv

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/command"
)

// ErrNoSpace refuses a write that adds data while the data dir's free space
// is below the configured floor (--min-free-disk). It comes before the disk
// is actually full, because a failed write to the raft log stops the node.
var ErrNoSpace = errors.New("out of disk space: free space is below --min-free-disk")

// SpaceGuard watches the free space of the data dir's filesystem and says
// when it is below a floor. Writes are refused while it is (reads, deletes
// and flush_all, which free space, still go through), and accepted again
// by themselves once space is back, like etcd's NOSPACE alarm without the
// manual disarm.
type SpaceGuard struct {
	min    uint64
	free   func() (uint64, error)
	logger *slog.Logger
	low    atomic.Bool
	blind  atomic.Bool // the last measurement failed
	avail  atomic.Uint64
}

// NewSpaceGuard watches free (bytes available to kvd) against min.
func NewSpaceGuard(min uint64, free func() (uint64, error), logger *slog.Logger) *SpaceGuard {
	return &SpaceGuard{min: min, free: free, logger: logger}
}

// Check measures once. A failed measurement changes nothing: the guard
// must not refuse writes because it cannot see the disk.
func (g *SpaceGuard) Check() {
	n, err := g.free()
	if err != nil {
		// Once per failing spell, not once a second.
		if !g.blind.Swap(true) {
			g.logger.Warn("cannot measure free disk space; writes are not refused meanwhile", "err", err)
		}
		return
	}
	g.blind.Store(false)
	g.avail.Store(n)
	low := n < g.min
	if g.low.Swap(low) != low {
		if low {
			g.logger.Error("free disk space below --min-free-disk: refusing writes until space is freed",
				"free_bytes", n, "min_free_bytes", g.min)
		} else {
			g.logger.Info("free disk space is back above --min-free-disk: accepting writes", "free_bytes", n)
		}
	}
}

// Run checks every interval until ctx ends.
func (g *SpaceGuard) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.Check()
		}
	}
}

// Low reports whether writes are being refused.
func (g *SpaceGuard) Low() bool { return g.low.Load() }

// Free is the free space last measured, in bytes.
func (g *SpaceGuard) Free() uint64 { return g.avail.Load() }

// freesSpace lists the operations a low disk still lets through: they
// remove data, so they are how an operator makes room.
func freesSpace(op command.Op) bool {
	switch op {
	case command.OpDelete, command.OpFlush, command.OpExpire:
		return true
	}
	return false
}
