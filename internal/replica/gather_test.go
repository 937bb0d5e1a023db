package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/raftlog"
)

// slowDisk is a real raft log (in memory) whose fsynced appends take as long
// as a slow disk's, so that writers pile up behind each fsync as they do in
// production.
type slowDisk struct {
	*raftlog.Log
	delay time.Duration
}

func (d slowDisk) Save(hs *pb.HardState, ents []*pb.Entry) error {
	if len(ents) > 0 {
		time.Sleep(d.delay)
	}
	return d.Log.Save(hs, ents)
}

// echoSM answers each entry with its index, addressed to the request ID the
// entry's data carries.
type echoSM struct{ applied atomic.Uint64 }

func (e *echoSM) Apply(ents []Entry) ([]command.Result, error) {
	var out []command.Result
	for _, en := range ents {
		if len(en.Data) == 8 {
			out = append(out, command.Result{ReqID: binary.BigEndian.Uint64(en.Data), Value: en.Index})
		}
		e.applied.Store(en.Index)
	}
	return out, nil
}
func (e *echoSM) AppliedIndex() uint64                 { return e.applied.Load() }
func (e *echoSM) Sync() (uint64, error)                { return e.applied.Load(), nil }
func (e *echoSM) InstallSnapshot([]byte, uint64) error { return errors.New("not used") }

// startSolo starts a single-member replica over a slow in-memory disk;
// each tweak changes its configuration first.
func startSolo(t *testing.T, delay time.Duration, tweaks ...func(*Config)) *Replica {
	t.Helper()
	return startSoloWith(t, &echoSM{}, delay, tweaks...)
}

// startSoloWith is startSolo over the state machine sm.
func startSoloWith(t *testing.T, sm StateMachine, delay time.Duration, tweaks ...func(*Config)) *Replica {
	t.Helper()
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	cfg := Config{ID: 1, Peers: []NodeID{1}, TickInterval: 10 * time.Millisecond}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	r, err := New(cfg, slowDisk{Log: l, delay: delay}, sm, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, r.Start(nil))
	t.Cleanup(func() {
		r.Stop()
		<-r.Done()
		require.NoError(t, l.Close())
	})
	require.Eventually(t, func() bool { return r.Status().Ready }, 10*time.Second, 5*time.Millisecond)
	return r
}

// write runs writers goroutines, each making count writes one after
// another (a memcached client without pipelining), and checks every answer.
// pause, if not nil, says how long writer w waits after its write i.
func write(t *testing.T, r *Replica, writers, count int, pause func(w, i int) time.Duration) {
	t.Helper()
	var next atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < count; i++ {
				id := next.Add(1)
				data := binary.BigEndian.AppendUint64(nil, id)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				p, err := r.Propose(ctx, time.Time{}, id, data)
				if err == nil {
					_, err = p.Wait(ctx, time.Time{})
				}
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if pause != nil {
					time.Sleep(pause(w, i))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// settled returns the status once it counts the writes made since before
// (the loop publishes its status just after it answers the writers).
func settled(t *testing.T, r *Replica, before Status, writes uint64) Status {
	t.Helper()
	var st Status
	require.Eventually(t, func() bool {
		st = r.Status()
		return st.SyncedEntries-before.SyncedEntries == writes
	}, 10*time.Second, time.Millisecond)
	return st
}

// TestGroupCommitGathersAnsweredWriters: with eight writers and a slow
// fsync, one fsync must cover nearly all of them. Without gather's hold they
// split into two groups that take turns (one fsyncing while the other,
// just answered, queues), and an fsync covers about half.
func TestGroupCommitGathersAnsweredWriters(t *testing.T) {
	// Idle, one run gets 7.4–8.0 writes per fsync; without the hold exactly
	// 4.0. A loaded machine can wake a writer later than the hold lasts for a
	// whole run, so the best of three runs is judged.
	best := 0.0
	for attempt := 0; attempt < 3 && best <= 5.0; attempt++ {
		r := startSolo(t, 3*time.Millisecond)
		before := r.Status()
		write(t, r, 8, 40, nil)
		st := settled(t, r, before, 8*40)
		batches := st.SyncedBatches - before.SyncedBatches
		entries := st.SyncedEntries - before.SyncedEntries
		holds := st.GatherHolds - before.GatherHolds
		perSync := float64(entries) / float64(batches)
		t.Logf("%d writes in %d fsyncs (%.1f each), %d holds", entries, batches, perSync, holds)
		require.Positive(t, holds)
		best = max(best, perSync)
	}
	require.Greater(t, best, 5.0, "eight writers should share most fsyncs")
}

// TestLoneWriterIsNeverHeld: a single writer has nobody to wait for, so its
// writes are never held back.
func TestLoneWriterIsNeverHeld(t *testing.T) {
	r := startSolo(t, time.Millisecond)
	before := r.Status()
	write(t, r, 1, 50, nil)
	st := settled(t, r, before, 50)
	require.EqualValues(t, 50, st.SyncedBatches-before.SyncedBatches)
	require.Zero(t, st.GatherHolds-before.GatherHolds)
}

// TestGatherBacksOffWhenWritersDoNotReturn: writers that pause between
// writes (a client that mostly reads, say) do not come back within a hold,
// so holding for them only delays the batch: gather must mostly stop.
func TestGatherBacksOffWhenWritersDoNotReturn(t *testing.T) {
	r := startSolo(t, 2*time.Millisecond)
	before := r.Status()
	// Pauses well past any hold (at most 1 ms), and different for each
	// writer so that they do not fall into step.
	write(t, r, 4, 25, func(w, i int) time.Duration { return time.Duration(3+2*w+i%3) * time.Millisecond })
	st := settled(t, r, before, 100)
	batches := st.SyncedBatches - before.SyncedBatches
	holds := st.GatherHolds - before.GatherHolds
	t.Logf("%d batches, %d holds", batches, holds)
	require.Less(t, holds, batches/3, "fruitless holds must back off")
}

// TestGatherWaitsForWritersSlowerThanHalfAnFsync: writers that come back
// later than half an fsync but sooner than a whole one (a busy node's
// writers, whose replies queue for the cores) still share one fsync:
// without the hold they take turns in two groups, and a round costs each
// of them two fsyncs instead of one and its pause.
func TestGatherWaitsForWritersSlowerThanHalfAnFsync(t *testing.T) {
	// A 1 ms fsync, and the four writers back 100, 350, 600 and 850 µs
	// after they are answered (a hold starts when the first is back): a
	// hold of half an fsync runs out, backs off, and about 2 writes share
	// an fsync; a hold of a whole one gathers all four. The pause is spun,
	// not slept: an idle Go process sleeps in whole milliseconds (its
	// poller's timeout), which would put every writer past any hold. The
	// best of three runs is judged, as above.
	pause := func(w, _ int) time.Duration {
		d := time.Duration(100+250*w) * time.Microsecond
		for start := time.Now(); time.Since(start) < d; {
			runtime.Gosched()
		}
		return 0
	}
	best := 0.0
	for attempt := 0; attempt < 3 && best <= 3.0; attempt++ {
		r := startSolo(t, time.Millisecond)
		// A lone writer first, never held, so that the fsync time's moving
		// average is learnt before any hold is bounded by it.
		start := r.Status()
		write(t, r, 1, 30, nil)
		before := settled(t, r, start, 30)
		write(t, r, 4, 40, pause)
		st := settled(t, r, before, 4*40)
		batches := st.SyncedBatches - before.SyncedBatches
		entries := st.SyncedEntries - before.SyncedEntries
		perSync := float64(entries) / float64(batches)
		t.Logf("%d writes in %d fsyncs (%.1f each), %d holds", entries, batches, perSync, st.GatherHolds-before.GatherHolds)
		best = max(best, perSync)
	}
	require.Greater(t, best, 3.0, "writers back within an fsync should share it")
}
