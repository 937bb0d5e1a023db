package replica

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/transport"
)

func TestRoundInFlight(t *testing.T) {
	const retry = 100 * time.Millisecond
	now := time.Unix(1000, 0)
	cases := []struct {
		name     string
		inflight []inflightRead
		busy     bool
		retried  int // readers told to retry
		left     int // requests still in flight afterwards
	}{
		{name: "nothing in flight"},
		{name: "a young round with readers", inflight: []inflightRead{{readers: readers(3), sentAt: now.Add(-retry / 2)}},
			busy: true, left: 1},
		{name: "a lease renewal holds nobody back", inflight: []inflightRead{{sentAt: now.Add(-retry / 2)}},
			left: 1},
		{name: "a stale round is given up", inflight: []inflightRead{{readers: readers(2), sentAt: now.Add(-retry)}},
			retried: 2},
		{name: "a stale round and a young one", inflight: []inflightRead{
			{readers: readers(2), sentAt: now.Add(-2 * retry)},
			{readers: readers(1), sentAt: now.Add(-retry / 10)},
		}, busy: true, retried: 2, left: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newReadBatcher()
			for _, req := range tc.inflight {
				b.request(req.readers, req.sentAt, 1)
			}
			require.Equal(t, tc.busy, b.roundInFlight(now, retry))
			retried := 0
			for _, req := range tc.inflight {
				for _, ch := range req.readers {
					select {
					case err := <-ch:
						require.ErrorIs(t, err, errReadRetry)
						retried++
					default:
					}
				}
			}
			require.Equal(t, tc.retried, retried, "readers told to retry")
			require.Len(t, b.inflight, tc.left, "requests left in flight")
		})
	}
}

func readers(n int) []chan error {
	out := make([]chan error, n)
	for i := range out {
		out[i] = make(chan error, 1)
	}
	return out
}

// readIndexGate stands between a replica and its transport: it counts the
// ReadIndex requests the replica sends (the readiness probe's aside), drops
// the first `drop` of them, and, while holding, keeps them back until
// release.
type readIndexGate struct {
	Transport
	mu      sync.Mutex
	sent    int
	drop    int
	holding bool
	held    []*pb.Message
}

func (g *readIndexGate) Send(msgs []*pb.Message) {
	out := make([]*pb.Message, 0, len(msgs))
	g.mu.Lock()
	for _, m := range msgs {
		if m.GetType() != pb.MsgReadIndex || len(m.GetEntries()) != 1 || strings.HasPrefix(string(m.GetEntries()[0].GetData()), readyProbePrefix) {
			out = append(out, m)
			continue
		}
		g.sent++
		switch {
		case g.drop > 0:
			g.drop--
		case g.holding:
			g.held = append(g.held, m)
		default:
			out = append(out, m)
		}
	}
	g.mu.Unlock()
	g.Transport.Send(out)
}

func (g *readIndexGate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sent
}

func (g *readIndexGate) release() {
	g.mu.Lock()
	held := g.held
	g.held, g.holding = nil, false
	g.mu.Unlock()
	g.Transport.Send(held)
}

// followerWrapped starts a three-voter group whose members' transports
// are wrapped by wrap, and returns a follower and its wrapper.
func followerWrapped[W Transport](t *testing.T, wrap func(Transport) W, tweaks ...func(*Config)) (*Replica, W) {
	t.Helper()
	net := transport.NewMemNetwork()
	t.Cleanup(net.Close)
	wrappers := map[NodeID]W{}
	reps, lead := startTrio(t, net, func(id NodeID, tr Transport) Transport {
		w := wrap(tr)
		wrappers[id] = w
		return w
	}, tweaks...)
	f := reps[(lead+1)%3]
	// startTrio waits for the leader only: a follower that has not heard
	// from it yet refuses proposals (no leader to forward them to), which
	// CI's race run once caught.
	leader := reps[lead].Status().ID
	require.Eventually(t, func() bool { st := f.Status(); return st.Ready && st.Leader == leader },
		10*time.Second, time.Millisecond, "the follower never learned the leader")
	return f, wrappers[f.Status().ID]
}

func gated(tr Transport) *readIndexGate { return &readIndexGate{Transport: tr} }

// TestReadersWaitForTheRoundInFlight: readers who arrive while a ReadIndex
// round is in flight do not start rounds of their own; they all go in the
// next one, sent as soon as the first is answered, and every reader is
// released.
func TestReadersWaitForTheRoundInFlight(t *testing.T) {
	// A leader change (a loaded machine can keep heartbeats back past an
	// election timeout) fails the round in flight, and the follower's next
	// round may go while it knows no leader, so the counts hold only for an
	// attempt with one leader throughout. Up to three are made.
	for attempt := 1; !readersWaitForTheRoundInFlight(t); attempt++ {
		require.Less(t, attempt, 3, "the leader changed during every attempt")
		t.Logf("attempt %d: the leader changed; again", attempt)
	}
}

// readersWaitForTheRoundInFlight runs one attempt; false if the leader
// changed during it.
func readersWaitForTheRoundInFlight(t *testing.T) bool {
	// The held round must not be given up while the test holds it, however
	// slow the machine.
	f, gate := followerWrapped(t, gated, func(c *Config) { c.ReadRetry = time.Hour })
	changes := f.Status().LeaderChanges
	stable := func() bool { return f.Status().LeaderChanges == changes }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gate.mu.Lock()
	gate.holding = true
	gate.mu.Unlock()
	first := make(chan error, 1)
	go func() { first <- f.ReadBarrier(ctx) }()
	require.Eventually(t, func() bool { return gate.count() >= 1 }, 5*time.Second, time.Millisecond)

	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() { errs <- f.ReadBarrier(ctx) }()
	}
	// Every one of them has joined the open batch and woken the loop.
	require.Eventually(t, func() bool {
		f.reads.mu.Lock()
		defer f.reads.mu.Unlock()
		return len(f.reads.open) == n || !stable()
	}, 5*time.Second, time.Millisecond)
	gate.release()
	require.NoError(t, <-first)
	for range n {
		require.NoError(t, <-errs)
	}
	if !stable() {
		return false
	}
	require.Equal(t, 2, gate.count(), "ReadIndex requests: the held one and one for the %d readers behind it", n)
	st := f.Status()
	require.Equal(t, uint64(2), st.ReadRounds)
	require.Equal(t, uint64(n+1), st.ReadRoundReads)
	return true
}

// TestLostReadRoundIsRetried: a ReadIndex request lost on the way holds the
// next round back only until the retry time; its reader is then served by a
// new round, well within its own deadline.
func TestLostReadRoundIsRetried(t *testing.T) {
	f, gate := followerWrapped(t, gated, func(c *Config) { c.ReadRetry = 200 * time.Millisecond })
	gate.mu.Lock()
	gate.drop = 1
	gate.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, f.ReadBarrier(ctx))
	// At least the lost request and its retry; a machine slow enough to
	// keep the retry past ReadRetry too sends a third, which is not wrong.
	require.GreaterOrEqual(t, gate.count(), 2, "ReadIndex requests: the lost one and its retry")
}

// TestReadIndexAnswerToAnEarlierProcessIsIgnored: a member's ReadIndex
// contexts must not repeat across its restarts. The leader answers a
// follower's request to whichever process of it is listening when the
// answer arrives, and a TCP peer queue delivers what it held once the
// restarted follower reconnects: with contexts numbered from 1 in every
// process, the answer to the previous process's first request released the
// new process's first reader at an index the leader had confirmed before
// that reader arrived, so it could miss a write acknowledged in between.
func TestReadIndexAnswerToAnEarlierProcessIsIgnored(t *testing.T) {
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	// No tick fires: the member stays a follower of node 1 throughout.
	cfg := Config{ID: 2, Peers: []NodeID{1, 2, 3}, TickInterval: time.Hour, ElectionTicks: 10}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// process starts the member, makes node 1 its leader at term, and
	// starts a reader; it returns the replica, the context of the ReadIndex
	// request the reader's round sent, and the reader's result.
	var term uint64
	process := func() (*Replica, []byte, chan error) {
		sent := &sentLog{}
		r, err := Start(cfg, l, &echoSM{}, sent, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.NoError(t, r.do(ctx, func() error {
			if term == 0 {
				term = r.rn.BasicStatus().GetTerm() + 1
			}
			r.step(&pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(term)})
			return nil
		}))
		require.NoError(t, r.do(ctx, func() error { return nil })) // the leader is known
		read := make(chan error, 1)
		go func() { read <- r.ReadBarrier(ctx) }()
		var rctx []byte
		require.Eventually(t, func() bool {
			sent.mu.Lock()
			defer sent.mu.Unlock()
			for _, m := range sent.msgs {
				if m.GetType() == pb.MsgReadIndex && len(m.GetEntries()) == 1 && !strings.HasPrefix(string(m.GetEntries()[0].GetData()), readyProbePrefix) {
					rctx = m.GetEntries()[0].GetData()
					return true
				}
			}
			return false
		}, 5*time.Second, time.Millisecond, "the reader's ReadIndex request was never sent")
		return r, rctx, read
	}
	answer := func(r *Replica, rctx []byte) {
		require.NoError(t, r.Step(ctx, &pb.Message{
			Type: pb.MsgReadIndexResp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(term),
			Index: new(uint64(0)), Entries: []*pb.Entry{{Data: rctx}},
		}))
	}

	first, oldCtx, _ := process()
	first.Stop()
	<-first.Done()

	second, newCtx, read := process()
	t.Cleanup(func() { second.Stop(); <-second.Done() })
	answer(second, oldCtx) // the late answer to the first process
	select {
	case err := <-read:
		t.Fatalf("the reader was released (%v) by the answer to the previous process's request", err)
	case <-time.After(200 * time.Millisecond):
	}
	answer(second, newCtx)
	require.NoError(t, <-read)
}

// TestReadyProbeAnswerToAnEarlierProcessIsIgnored: a member is ready once it
// applied the commit index its leader had when it found it, learned by a
// ReadIndex probe. The leader answers to whichever process of the member
// listens, so the answer to a previous process's probe (a commit index of
// then) made the new one ready before it had caught up.
func TestReadyProbeAnswerToAnEarlierProcessIsIgnored(t *testing.T) {
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	// A tick fires only once an hour: the probe goes out when the status
	// is published after the leader is found, and is never resent.
	cfg := Config{ID: 2, Peers: []NodeID{1, 2, 3}, TickInterval: time.Hour, ElectionTicks: 10}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var term uint64
	process := func() (*Replica, []byte) {
		sent := &sentLog{}
		r, err := Start(cfg, l, &echoSM{}, sent, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.NoError(t, r.do(ctx, func() error {
			first := term == 0
			if first {
				term = r.rn.BasicStatus().GetTerm() + 1
			}
			r.step(&pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(term)})
			if first {
				// Two entries, committed: each process applies them.
				r.step(&pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(term),
					LogTerm: new(uint64(0)), Index: new(uint64(0)), Commit: new(uint64(2)),
					Entries: []*pb.Entry{{Index: new(uint64(1)), Term: new(term)}, {Index: new(uint64(2)), Term: new(term)}}})
			}
			return nil
		}))
		var probe []byte
		require.Eventually(t, func() bool {
			// The probe goes out with the Ready after the status that
			// sent it: a turn of the loop hands it over.
			require.NoError(t, r.do(ctx, func() error { return nil }))
			sent.mu.Lock()
			defer sent.mu.Unlock()
			for _, m := range sent.msgs {
				if m.GetType() == pb.MsgReadIndex && len(m.GetEntries()) == 1 && strings.HasPrefix(string(m.GetEntries()[0].GetData()), readyProbePrefix) {
					probe = m.GetEntries()[0].GetData()
					return true
				}
			}
			return false
		}, 5*time.Second, time.Millisecond, "the readiness probe was never sent")
		return r, probe
	}
	answer := func(r *Replica, probe []byte, index uint64) {
		require.NoError(t, r.Step(ctx, &pb.Message{
			Type: pb.MsgReadIndexResp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(term),
			Index: new(index), Entries: []*pb.Entry{{Data: probe}},
		}))
		require.NoError(t, r.do(ctx, func() error { return nil })) // handled, status published
	}

	first, oldProbe := process()
	first.Stop()
	<-first.Done()

	second, newProbe := process()
	t.Cleanup(func() { second.Stop(); <-second.Done() })
	require.Eventually(t, func() bool { return second.Status().Applied == 2 }, 5*time.Second, time.Millisecond)
	// The late answer to the first process: the commit index of then, 2,
	// which the second has applied (the leader's may be far ahead by now).
	answer(second, oldProbe, 2)
	require.False(t, second.Status().Ready, "ready on the answer to the previous process's probe")
	answer(second, newProbe, 2)
	require.True(t, second.Status().Ready)
}

// TestReadRoundRetriedAtANewTermOfTheSameLeader: a leader re-elected at a
// higher term answers no ReadIndex request of the earlier term. The rounds
// in flight were failed only when the leader changed, so with the same
// leader they waited out ReadRetry (half an election timeout) first.
func TestReadRoundRetriedAtANewTermOfTheSameLeader(t *testing.T) {
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	// No tick fires, and ReadRetry is half an election timeout: hours.
	cfg := Config{ID: 2, Peers: []NodeID{1, 2, 3}, TickInterval: time.Hour, ElectionTicks: 10}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sent := &sentLog{}
	r, err := Start(cfg, l, &echoSM{}, sent, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { r.Stop(); <-r.Done() })
	var term uint64
	heartbeat := func() {
		require.NoError(t, r.do(ctx, func() error {
			r.step(&pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(term)})
			return nil
		}))
	}
	require.NoError(t, r.do(ctx, func() error { term = r.rn.BasicStatus().GetTerm() + 1; return nil }))
	heartbeat()
	rounds := func() int {
		require.NoError(t, r.do(ctx, func() error { return nil }))
		sent.mu.Lock()
		defer sent.mu.Unlock()
		n := 0
		for _, m := range sent.msgs {
			if m.GetType() == pb.MsgReadIndex && len(m.GetEntries()) == 1 && !strings.HasPrefix(string(m.GetEntries()[0].GetData()), readyProbePrefix) {
				n++
			}
		}
		return n
	}
	read := make(chan error, 1)
	go func() { read <- r.ReadBarrier(ctx) }()
	require.Eventually(t, func() bool { return rounds() == 1 }, 5*time.Second, time.Millisecond, "the reader's round was never sent")
	term++ // node 1 again, re-elected
	heartbeat()
	require.Eventually(t, func() bool { return rounds() == 2 }, 5*time.Second, time.Millisecond,
		"the round of the earlier term was not retried at the new one")
}
