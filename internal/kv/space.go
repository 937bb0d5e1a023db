package kv

import (
	"context"
	"errors"
	"log/slog"
	"math"
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
	resume uint64 // free bytes that lift a low guard: min plus a margin
	free   func() (uint64, error)
	logger *slog.Logger
	low    atomic.Bool
	blind  atomic.Bool // the last measurement failed
	avail  atomic.Uint64
}

// NewSpaceGuard watches free (bytes available to kvd) against min.
// Once low, it lifts only when free space is back above min by an eighth of
// min: a disk hovering at the floor, filled by writes and emptied by
// compactions, would otherwise flip between refusing and accepting writes,
// and log an error, every second.
func NewSpaceGuard(min uint64, free func() (uint64, error), logger *slog.Logger) *SpaceGuard {
	resume := min + min/8
	if resume < min {
		resume = math.MaxUint64 // a floor near 2^64: no margin left
	}
	return &SpaceGuard{min: min, resume: resume, free: free, logger: logger}
}

// Check measures once. A failed measurement changes nothing: the guard
// does not start refusing writes because it cannot see the disk, nor stop
// refusing them on a disk it last saw low.
func (g *SpaceGuard) Check() {
	n, err := g.free()
	if err != nil {
		// Once per failing spell, not once a second; saying what the
		// guard keeps doing meanwhile, which depends on its last reading.
		if !g.blind.Swap(true) {
			if g.low.Load() {
				g.logger.Warn("cannot measure free disk space; writes stay refused until a measurement shows space", "err", err)
			} else {
				g.logger.Warn("cannot measure free disk space; writes are not refused meanwhile", "err", err)
			}
		}
		return
	}
	g.blind.Store(false)
	g.avail.Store(n)
	was := g.low.Load()
	low := n < g.min || (was && n < g.resume)
	if g.low.Swap(low) != low {
		if low {
			g.logger.Error("free disk space below --min-free-disk: refusing writes until space is freed",
				"free_bytes", n, "min_free_bytes", g.min, "resume_free_bytes", g.resume)
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

// passesLowDisk lists the operations a low disk still lets through. Deletes,
// flush_all and the leader's expiry sweep remove data: they are how an
// operator makes room. A member's addresses are a row of a few hundred bytes
// a node publishes when it starts or moves: refusing them on a low disk
// would leave peers dialling its old address, so that it could not even
// receive the deletes that free space. A cluster version raise is a few
// bytes too, retried by the leader every half second while refused. md is
// a delete too: with I or x it keeps the item, stale or emptied, never
// larger than by the few bytes of its meta state.
func passesLowDisk(op command.Op) bool {
	switch op {
	case command.OpDelete, command.OpDeleteCAS, command.OpMetaDelete, command.OpFlush, command.OpExpire, command.OpMember, command.OpClusterVersion:
		return true
	}
	return false
}
