package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func leaderStatus(term, commit, transferee uint64) raft.BasicStatus {
	return raft.BasicStatus{
		HardState:      &pb.HardState{Term: &term, Commit: &commit},
		SoftState:      raft.SoftState{RaftState: raft.StateLeader},
		LeadTransferee: transferee,
	}
}

func TestLeaseDuration(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		witness bool
		want    time.Duration
	}{
		{"off", Config{LeaseReads: false, ElectionTicks: 10, TickInterval: 50 * time.Millisecond}, false, 0},
		{"defaults", Config{LeaseReads: true, ElectionTicks: 10, TickInterval: 50 * time.Millisecond}, false, 360 * time.Millisecond},
		{"too few ticks to bound", Config{LeaseReads: true, ElectionTicks: 2, TickInterval: time.Second}, false, 0},
		// A witness refuses votes for two ticks fewer.
		{"a witness voter", Config{LeaseReads: true, ElectionTicks: 10, HeartbeatTicks: 1, TickInterval: 50 * time.Millisecond}, true, 270 * time.Millisecond},
		{"a witness voter, few ticks", Config{LeaseReads: true, ElectionTicks: 4, HeartbeatTicks: 1, TickInterval: 50 * time.Millisecond}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, leaseDuration(tc.cfg, tc.witness))
		})
	}
}

func TestReadLease(t *testing.T) {
	const dur = 400 * time.Millisecond
	t0 := time.Now()
	earned := func() *readLease {
		l := &readLease{dur: dur}
		l.acknowledged(inflightRead{sentAt: t0, term: 5}, leaderStatus(5, 100, 0))
		return l
	}
	for _, tc := range []struct {
		name  string
		lease func() *readLease
		at    time.Time
		st    raft.BasicStatus
		ok    bool
		index uint64
	}{
		{"never earned", func() *readLease { return &readLease{dur: dur} }, t0, leaderStatus(5, 100, 0), false, 0},
		{"within the lease: the commit index", earned, t0.Add(dur - time.Millisecond), leaderStatus(5, 120, 0), true, 120},
		{"expired (a pause lands here too)", earned, t0.Add(dur), leaderStatus(5, 120, 0), false, 0},
		{"no longer leader", earned, t0.Add(time.Millisecond), raft.BasicStatus{HardState: &pb.HardState{}, SoftState: raft.SoftState{RaftState: raft.StateFollower}}, false, 0},
		{"newer term", earned, t0.Add(time.Millisecond), leaderStatus(6, 120, 0), false, 0},
		{"transfer under way", earned, t0.Add(time.Millisecond), leaderStatus(5, 120, 3), false, 0},
		{"transfer sent earlier in the term", func() *readLease {
			l := earned()
			l.sawMessages([]*pb.Message{{Type: new(pb.MsgTimeoutNow)}}, 5)
			return l
		}, t0.Add(time.Millisecond), leaderStatus(5, 120, 0), false, 0},
		{"lease mode off", func() *readLease { return &readLease{} }, t0, leaderStatus(5, 100, 0), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.lease()
			index, ok := l.valid(tc.at, tc.st)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.index, index)
		})
	}
}

func TestReadLeaseEarning(t *testing.T) {
	const dur = 400 * time.Millisecond
	t0 := time.Now()
	t.Run("a follower's answer earns nothing", func(t *testing.T) {
		l := &readLease{dur: dur}
		l.acknowledged(inflightRead{sentAt: t0, term: 5}, raft.BasicStatus{HardState: &pb.HardState{}, SoftState: raft.SoftState{RaftState: raft.StateFollower}})
		_, ok := l.valid(t0, leaderStatus(5, 1, 0))
		require.False(t, ok)
	})
	t.Run("a request from an older term earns nothing", func(t *testing.T) {
		l := &readLease{dur: dur}
		l.acknowledged(inflightRead{sentAt: t0, term: 4}, leaderStatus(5, 1, 0))
		_, ok := l.valid(t0, leaderStatus(5, 1, 0))
		require.False(t, ok)
	})
	t.Run("counted from the send time, never shortened by a late answer", func(t *testing.T) {
		l := &readLease{dur: dur}
		l.acknowledged(inflightRead{sentAt: t0.Add(100 * time.Millisecond), term: 5}, leaderStatus(5, 1, 0))
		l.acknowledged(inflightRead{sentAt: t0, term: 5}, leaderStatus(5, 1, 0))
		require.Equal(t, t0.Add(100*time.Millisecond+dur), l.until)
	})
	t.Run("renewal", func(t *testing.T) {
		l := &readLease{dur: dur}
		st := leaderStatus(5, 1, 0)
		require.False(t, l.wantsRenewal(t0, st), "unused lease")
		l.valid(t0, st) // a read wanted it
		require.True(t, l.wantsRenewal(t0, st), "no lease yet")
		l.renewAt = t0
		require.False(t, l.wantsRenewal(t0.Add(time.Millisecond), st), "renewal in flight")
		l.acknowledged(inflightRead{sentAt: t0, term: 5}, st)
		require.True(t, l.renewAt.IsZero())
		require.False(t, l.wantsRenewal(t0.Add(dur/4), st), "plenty of lease left")
		require.True(t, l.wantsRenewal(t0.Add(dur*3/4), st), "more than half gone")
		require.False(t, l.wantsRenewal(t0.Add(3*dur), st), "not used lately")
	})
}
