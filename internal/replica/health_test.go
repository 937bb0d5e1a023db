package replica

import (
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/transport"
)

// startTrio starts a three-voter group on an in-process network and
// returns its replicas (index i is node i+1) and the index of the leader.
// wrap, if not nil, stands between each replica and its transport; tweaks
// change the replicas' configuration.
func startTrio(t *testing.T, net *transport.MemNetwork, wrap func(NodeID, Transport) Transport, tweaks ...func(*Config)) ([]*Replica, int) {
	t.Helper()
	return startTrioWith(t, net, nil, wrap, tweaks...)
}

// trioParts gives node i the raft log and state machine it runs on, given
// a fresh log in memory (closed by the test's cleanup).
type trioParts func(i int, l *raftlog.Log) (LogStore, StateMachine)

// startTrioWith is startTrio with the nodes' logs and state machines from
// parts (nil: the fresh log itself and an echoSM).
func startTrioWith(t *testing.T, net *transport.MemNetwork, parts trioParts, wrap func(NodeID, Transport) Transport, tweaks ...func(*Config)) ([]*Replica, int) {
	t.Helper()
	peers := []NodeID{1, 2, 3}
	reps := make([]*Replica, len(peers))
	for i, id := range peers {
		l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
		require.NoError(t, err)
		var log LogStore = l
		var sm StateMachine = &echoSM{}
		if parts != nil {
			log, sm = parts(i, l)
		}
		// Thirty ticks to an election: a loaded machine must not cost the
		// leader its leadership mid-test.
		cfg := Config{ID: id, Peers: peers, TickInterval: 10 * time.Millisecond, ElectionTicks: 30}
		for _, tweak := range tweaks {
			tweak(&cfg)
		}
		r, err := New(cfg, log, sm, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		tr := net.Transport(uint64(id), r)
		var rt Transport = tr
		if wrap != nil {
			rt = wrap(id, tr)
		}
		require.NoError(t, r.Start(rt))
		reps[i] = r
		t.Cleanup(func() {
			r.Stop()
			<-r.Done()
			require.NoError(t, tr.Close())
			require.NoError(t, l.Close())
		})
	}
	lead := -1
	require.Eventually(t, func() bool {
		for i, r := range reps {
			if st := r.Status(); st.Ready && st.Leader == st.ID {
				lead = i
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	return reps, lead
}

// TestLeaderSeesLiveFollowersAtEveryTick samples the leader's published
// progress many times per tick over several election timeouts: a follower
// that answers every heartbeat must never show as inactive, not even in the
// tick where CheckQuorum clears raft's activity flags. Then a stopped
// follower must show as inactive.
func TestLeaderSeesLiveFollowersAtEveryTick(t *testing.T) {
	net := transport.NewMemNetwork()
	defer net.Close()
	reps, lead := startTrio(t, net, nil)
	leader := reps[lead]
	// From the first tick at which both followers have answered the new
	// leader: before that, raft rightly knows nothing of them.
	require.Eventually(t, func() bool {
		p := leader.Progress()
		if len(p) != 3 {
			return false
		}
		for _, pr := range p {
			if !pr.Active {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)

	// Every progress the leader publishes (one per tick) over a hundred
	// ticks, so three CheckQuorum resets: none may show a live follower as
	// inactive. Sampling is ten times a tick, so few ticks are missed.
	seen := 0
	var last *map[NodeID]Progress
	deadline := time.Now().Add(30 * time.Second)
	for seen < 100 && time.Now().Before(deadline) {
		if p := leader.progress.Load(); p != last {
			require.NotNil(t, p, "the leader lost its leadership after %d ticks", seen)
			last = p
			seen++
			for id, pr := range *p {
				require.True(t, pr.Active, "follower %x inactive in published progress %d", id, seen)
			}
		}
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, 100, seen, "the leader published progress for 100 ticks")

	// A follower that is gone is reported as such.
	gone := reps[(lead+1)%3]
	goneID := gone.Status().ID
	net.Partition([]uint64{uint64(goneID)}, others(goneID))
	require.Eventually(t, func() bool {
		pr, ok := leader.Progress()[goneID]
		return ok && !pr.Active
	}, 10*time.Second, 5*time.Millisecond)
	require.True(t, leader.Progress()[reps[(lead+2)%3].Status().ID].Active)
}

func others(id NodeID) []uint64 {
	var out []uint64
	for _, p := range []NodeID{1, 2, 3} {
		if p != id {
			out = append(out, uint64(p))
		}
	}
	return out
}

// fakeLinks stands for a transport's knowledge of its connections.
type fakeLinks map[uint64]bool

func (f fakeLinks) Connected(id uint64) bool { return f[id] }

// statusOfLeader is a leader's raft status with one progress per member;
// active lists the members raft currently flags as recently active.
func statusOfLeader(self uint64, members []uint64, active ...uint64) raft.Status {
	st := raft.Status{Progress: map[uint64]tracker.Progress{}}
	st.ID = self
	for _, id := range members {
		st.Progress[id] = tracker.Progress{Match: 7, RecentActive: id == self || slices.Contains(active, id)}
	}
	return st
}

// TestLeaderProgressHealth walks a leader through its first ticks, one
// member live and one whose connection is down although raft still flags
// it active (answers it sent just before it died, stepped late): the live
// one is unknown until heard and healthy after; the dead one is unknown
// while the leader is new and unhealthy after, whatever raft's flags say.
func TestLeaderProgressHealth(t *testing.T) {
	const self, live, dead = 1, 2, 3
	members := []uint64{self, live, dead}
	steps := []struct {
		name           string
		tick           uint64
		active         []uint64 // raft's RecentActive flags at this tick
		links          fakeLinks
		live, dead     Progress // want, Match aside
		removeSelfSafe bool
	}{
		{name: "first tick: nobody heard yet", tick: 1, links: fakeLinks{live: true},
			live: Progress{Unknown: true}, dead: Progress{Unknown: true}},
		{name: "the live member answers; the dead one's late answer is stepped", tick: 2, active: []uint64{live, dead}, links: fakeLinks{live: true},
			live: Progress{Active: true}, dead: Progress{Unknown: true}},
		{name: "CheckQuorum cleared the flags: the live member still counts", tick: 9,
			links: fakeLinks{live: true},
			live:  Progress{Active: true}, dead: Progress{Unknown: true}},
		{name: "an election timeout in: the dead member is unhealthy", tick: 11, active: []uint64{live, dead}, links: fakeLinks{live: true},
			live: Progress{Active: true}, dead: Progress{}},
		{name: "its connection back up: healthy again", tick: 12, active: []uint64{live, dead}, links: fakeLinks{live: true, dead: true},
			live: Progress{Active: true}, dead: Progress{Active: true}, removeSelfSafe: true},
		{name: "the live member silent past the window", tick: 30, links: fakeLinks{live: true, dead: true},
			live: Progress{}, dead: Progress{}},
	}
	r := &Replica{cfg: Config{ElectionTicks: 10}}
	links := fakeLinks{}
	r.links = links
	for _, s := range steps {
		clear(links)
		maps.Copy(links, s.links)
		r.ticks = s.tick
		st := statusOfLeader(self, members, s.active...)
		got := r.leaderProgress(st)
		require.Equal(t, Progress{Match: 7, Active: true}, got[self], s.name)
		s.live.Match, s.dead.Match = 7, 7
		require.Equal(t, s.live, got[live], "%s: the live member", s.name)
		require.Equal(t, s.dead, got[dead], "%s: the dead member", s.name)
		// Removing the leader leaves the two: both must be heard.
		err := removalSafe(st, members, self, r.heardFrom)
		if s.removeSelfSafe {
			require.NoError(t, err, s.name)
		} else {
			require.ErrorIs(t, err, ErrQuorumAtRisk, s.name)
		}
	}
}

// TestHeardFromWithoutLinks: a transport that does not know its
// connections leaves raft's flags, and the window after them, to decide.
func TestHeardFromWithoutLinks(t *testing.T) {
	r := &Replica{cfg: Config{ElectionTicks: 10}, ticks: 20, heardAt: map[uint64]uint64{2: 15, 3: 5}}
	require.True(t, r.heardFrom(2, tracker.Progress{}), "heard within the window")
	require.False(t, r.heardFrom(3, tracker.Progress{}), "heard before the window")
	require.True(t, r.heardFrom(4, tracker.Progress{RecentActive: true}), "flagged by raft")
	require.False(t, r.heardFrom(4, tracker.Progress{}), "never heard")
}
