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

// soloFollower is member 2 of {1, 2, 3} on log l, whose messages are
// recorded, with no tick firing (a tick an hour): it stays a follower of
// whichever leader the test makes it hear, and sends nothing of its own
// accord. term is that leader's term, 0 until hearLeader picks one.
type soloFollower struct {
	t    *testing.T
	ctx  context.Context
	r    *Replica
	sent *sentLog
	term *uint64
}

func startSoloFollower(t *testing.T, ctx context.Context, l *raftlog.Log, term *uint64) *soloFollower {
	t.Helper()
	return startSoloFollowerWith(t, ctx, l, term, &echoSM{})
}

// startSoloFollowerWith is startSoloFollower over the state machine sm.
func startSoloFollowerWith(t *testing.T, ctx context.Context, l *raftlog.Log, term *uint64, sm StateMachine) *soloFollower {
	t.Helper()
	sent := &sentLog{}
	cfg := Config{ID: 2, Peers: []NodeID{1, 2, 3}, TickInterval: time.Hour, ElectionTicks: 10}
	r, err := New(cfg, l, sm, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, r.Start(sent))
	return &soloFollower{t: t, ctx: ctx, r: r, sent: sent, term: term}
}

func memLog(t *testing.T) *raftlog.Log {
	t.Helper()
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// hearLeader steps a heartbeat of node 1 at *f.term (picking the term after
// the member's own when it is 0), and extra messages of node 1 after it.
func (f *soloFollower) hearLeader(extra ...*pb.Message) {
	f.t.Helper()
	require.NoError(f.t, f.r.do(f.ctx, func() error {
		if *f.term == 0 {
			*f.term = f.r.rn.BasicStatus().GetTerm() + 1
		}
		f.r.step(&pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(*f.term)})
		for _, m := range extra {
			m.Term = new(*f.term)
			f.r.step(m)
		}
		return nil
	}))
}

// readIndexSent lists the contexts of the ReadIndex requests sent so far:
// the readiness probe's (probe) or the readers'. A turn of the loop first
// hands over what the last status published asked for.
func (f *soloFollower) readIndexSent(probe bool) [][]byte {
	f.t.Helper()
	require.NoError(f.t, f.r.do(f.ctx, func() error { return nil }))
	f.sent.mu.Lock()
	defer f.sent.mu.Unlock()
	var out [][]byte
	for _, m := range f.sent.msgs {
		if m.GetType() == pb.MsgReadIndex && len(m.GetEntries()) == 1 &&
			strings.HasPrefix(string(m.GetEntries()[0].GetData()), readyProbePrefix) == probe {
			out = append(out, m.GetEntries()[0].GetData())
		}
	}
	return out
}

// firstReadIndex waits for the first ReadIndex request of the kind.
func (f *soloFollower) firstReadIndex(probe bool) []byte {
	f.t.Helper()
	var ctx []byte
	require.Eventually(f.t, func() bool {
		if sent := f.readIndexSent(probe); len(sent) > 0 {
			ctx = sent[0]
			return true
		}
		return false
	}, 5*time.Second, time.Millisecond, "no ReadIndex request (probe %v) was sent", probe)
	return ctx
}

// answer steps node 1's answer to the ReadIndex request rctx, at index.
func (f *soloFollower) answer(rctx []byte, index uint64) {
	f.t.Helper()
	require.NoError(f.t, f.r.Step(f.ctx, &pb.Message{
		Type: pb.MsgReadIndexResp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(*f.term),
		Index: new(index), Entries: []*pb.Entry{{Data: rctx}},
	}))
	require.NoError(f.t, f.r.do(f.ctx, func() error { return nil })) // handled, status published
}

func (f *soloFollower) stop() {
	f.r.Stop()
	<-f.r.Done()
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
	l := memLog(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var term uint64
	// process starts the member, makes node 1 its leader and starts a
	// reader; it returns the member, the context of the ReadIndex request
	// the reader's round sent, and the reader's result.
	process := func() (*soloFollower, []byte, chan error) {
		f := startSoloFollower(t, ctx, l, &term)
		f.hearLeader()
		read := make(chan error, 1)
		go func() { read <- f.r.ReadBarrier(ctx) }()
		return f, f.firstReadIndex(false), read
	}
	first, oldCtx, _ := process()
	first.stop()

	second, newCtx, read := process()
	t.Cleanup(second.stop)
	second.answer(oldCtx, 0) // the late answer to the first process
	select {
	case err := <-read:
		t.Fatalf("the reader was released (%v) by the answer to the previous process's request", err)
	case <-time.After(200 * time.Millisecond):
	}
	second.answer(newCtx, 0)
	require.NoError(t, <-read)
}

// TestReadyProbeAnswerToAnEarlierProcessIsIgnored: a member is ready once it
// applied the commit index its leader had when it found it, learned by a
// ReadIndex probe. The leader answers to whichever process of the member
// listens, so the answer to a previous process's probe (a commit index of
// then) made the new one ready before it had caught up.
func TestReadyProbeAnswerToAnEarlierProcessIsIgnored(t *testing.T) {
	l := memLog(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var term uint64
	first := startSoloFollower(t, ctx, l, &term)
	// Two entries, committed: each process applies them.
	first.hearLeader(&pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		LogTerm: new(uint64(0)), Index: new(uint64(0)), Commit: new(uint64(2)),
		Entries: []*pb.Entry{{Index: new(uint64(1)), Term: new(term)}, {Index: new(uint64(2)), Term: new(term)}}})
	oldProbe := first.firstReadIndex(true)
	first.stop()

	second := startSoloFollower(t, ctx, l, &term)
	t.Cleanup(second.stop)
	second.hearLeader()
	newProbe := second.firstReadIndex(true)
	require.Eventually(t, func() bool { return second.r.Status().Applied == 2 }, 5*time.Second, time.Millisecond)
	// The late answer to the first process: the commit index of then, 2,
	// which the second has applied (the leader's may be far ahead by now).
	second.answer(oldProbe, 2)
	require.False(t, second.r.Status().Ready, "ready on the answer to the previous process's probe")
	second.answer(newProbe, 2)
	require.True(t, second.r.Status().Ready)
}

// TestReadRoundRetriedAtANewTermOfTheSameLeader: a leader re-elected at a
// higher term answers no ReadIndex request of the earlier term. The rounds
// in flight were failed only when the leader changed, so with the same
// leader they waited out ReadRetry (half an election timeout: hours here).
func TestReadRoundRetriedAtANewTermOfTheSameLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var term uint64
	f := startSoloFollower(t, ctx, memLog(t), &term)
	t.Cleanup(f.stop)
	f.hearLeader()
	go func() { _ = f.r.ReadBarrier(ctx) }()
	f.firstReadIndex(false)
	require.NoError(t, f.r.do(ctx, func() error { return nil }))
	before := len(f.readIndexSent(false))
	term++ // node 1 again, re-elected
	f.hearLeader()
	require.Eventually(t, func() bool { return len(f.readIndexSent(false)) > before }, 5*time.Second, time.Millisecond,
		"the round of the earlier term was not retried at the new one")
}
