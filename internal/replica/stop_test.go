package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/transport"
)

// failingLog is a raft log whose appends fail once fail is set, as a disk
// that has filled up or gone bad.
type failingLog struct {
	*raftlog.Log
	fail atomic.Bool
}

func (l *failingLog) Save(hs *pb.HardState, ents []*pb.Entry) error {
	if len(ents) > 0 && l.fail.Load() {
		return errors.New("injected: disk failed")
	}
	return l.Log.Save(hs, ents)
}

// seenSM is echoSM that also remembers the request IDs it applied.
type seenSM struct {
	echoSM
	seen sync.Map
}

func (s *seenSM) Apply(ents []Entry) ([]command.Result, error) {
	out, err := s.echoSM.Apply(ents)
	for _, a := range out {
		s.seen.Store(a.ReqID, true)
	}
	return out, err
}

// TestFailedLeaderFsyncReportsUnknownOutcome: a leader sends its appends
// before its own fsync; when that fsync fails the node stops, and the
// followers may still commit the entry under a new leader. Its proposer was
// told ErrStopped ("shutting down"), which says the write did not happen,
// and it did.
func TestFailedLeaderFsyncReportsUnknownOutcome(t *testing.T) {
	net := transport.NewMemNetwork()
	defer net.Close()
	logs := make([]*failingLog, 3)
	sms := make([]*seenSM, 3)
	reps, lead := startTrioWith(t, net, func(i int, l *raftlog.Log) (LogStore, StateMachine) {
		logs[i], sms[i] = &failingLog{Log: l}, &seenSM{}
		return logs[i], sms[i]
	}, nil)

	logs[lead].fail.Store(true)
	const reqID = 77
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := reps[lead].Propose(ctx, time.Time{}, reqID, binary.BigEndian.AppendUint64(nil, reqID))
	require.NoError(t, err)
	_, err = p.Wait(ctx, time.Time{})
	require.ErrorIs(t, err, ErrUnknownOutcome)
	<-reps[lead].Done()
	require.Error(t, reps[lead].Err(), "the failed fsync must stop the node")

	// And indeed: the other two elect a leader that commits the write.
	require.Eventually(t, func() bool {
		for i, sm := range sms {
			if _, ok := sm.seen.Load(uint64(reqID)); ok && i != lead {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the write was not applied by the others")
}

// TestStopBeforeStart: a replica built but never started (its transport
// failed to bind, say) stops at once, failing what was proposed to it, and
// cannot be started afterwards.
func TestStopBeforeStart(t *testing.T) {
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	r, err := New(Config{ID: 1, Peers: []NodeID{1}}, l, &echoSM{}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	p, err := r.Propose(context.Background(), time.Time{}, 1, []byte("12345678"))
	require.NoError(t, err)
	r.Stop()
	<-r.Done()
	_, err = p.Wait(context.Background(), time.Now().Add(10*time.Second))
	require.Error(t, err)
	require.Error(t, r.Start(nil), "a stopped replica must not start")
}
