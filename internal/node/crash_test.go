package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/replica"
)

// stack is the write path of one node — raft log, replica, state machine,
// kv service — over a filesystem the test controls.
type stack struct {
	log *raftlog.Log
	sm  *fsm.FSM
	rep *replica.Replica
	kv  *kv.Service
}

func openStack(t *testing.T, fs vfs.FS) *stack {
	t.Helper()
	return openStackAt(t, fs, "/data", slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// openStackAt opens the stack on dataDir of fs, logging to logger.
func openStackAt(t *testing.T, fs vfs.FS, dataDir string, logger *slog.Logger) *stack {
	t.Helper()
	return openStackWith(t, fs, dataDir, logger, replica.Config{
		ID: 1, Peers: []replica.NodeID{1}, TickInterval: 10 * time.Millisecond,
		// Compact often, so the crash also lands around log compactions.
		CompactEvery: 64, CompactKeep: 16,
	})
}

// stackFlushAfter is the test stacks' fsm.Options.FlushAfterBytes: small,
// so that the state store flushes every few writes and crashes land around
// flushes as well as log compactions.
const stackFlushAfter = 16 << 10

// openStackWith opens the stack with the given replica configuration and
// waits until its replica is ready.
func openStackWith(t *testing.T, fs vfs.FS, dataDir string, logger *slog.Logger, rcfg replica.Config) *stack {
	t.Helper()
	s := startStack(t, fs, dataDir, logger, rcfg)
	deadline := time.Now().Add(10 * time.Second)
	for !s.rep.Status().Ready {
		require.True(t, time.Now().Before(deadline), "replica not ready")
		time.Sleep(5 * time.Millisecond)
	}
	return s
}

// startStack opens the stack and starts its replica, which replays the
// log on its own goroutine: the caller decides what to wait for.
func startStack(t *testing.T, fs vfs.FS, dataDir string, logger *slog.Logger, rcfg replica.Config) *stack {
	t.Helper()
	l, err := raftlog.Open(filepath.Join(dataDir, "raft"), logger, raftlog.Options{FS: fs})
	require.NoError(t, err)
	sm, err := fsm.Open(filepath.Join(dataDir, "state"), logger, fsm.Options{FS: fs, CacheBytes: 1 << 20, FlushAfterBytes: stackFlushAfter})
	require.NoError(t, err)
	rep, err := replica.New(rcfg, l, fsmAdapter{f: sm, dataDir: dataDir}, logger)
	require.NoError(t, err)
	// A group of one: nobody to send to.
	require.NoError(t, rep.Start(nil))
	return &stack{log: l, sm: sm, rep: rep, kv: kv.New(kv.Config{RequestTimeout: 5 * time.Second, MaxItemSize: 1 << 20}, rep, sm, logger, time.Now)}
}

func (s *stack) close() {
	s.rep.Stop()
	_ = s.sm.Close()
	_ = s.log.Close()
}

// TestAcknowledgedWritesSurvivePowerLoss cuts power (everything not fsynced
// is lost) while writers are running, and checks that every write that was
// acknowledged before the cut is there after recovery, with its value.
func TestAcknowledgedWritesSurvivePowerLoss(t *testing.T) {
	for round := 0; round < 3; round++ {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			s := openStack(t, fs)

			var cut atomic.Bool
			var running atomic.Int32
			var mu sync.Mutex
			acked := map[string]string{}
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ {
				wg.Add(1)
				running.Add(1)
				go func() {
					defer wg.Done()
					defer running.Add(-1)
					for i := 0; i < 400 && !cut.Load(); i++ {
						key, val := fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("v%d-%d-%d", round, w, i)
						_, err := s.kv.Do(context.Background(), &command.Command{Op: command.OpSet, Key: []byte(key), Value: []byte(val)})
						// An acknowledgement that returns after the cut may
						// rest on a sync the cut swallowed: only those seen
						// before it count.
						if err == nil && !cut.Load() {
							mu.Lock()
							acked[key] = val
							mu.Unlock()
						}
					}
				}()
			}
			// Cut after a number of acknowledgements that grows per round
			// (so the cut lands at different points of the log and its
			// compactions), or when the writers are done.
			target := 300 * (round + 1)
			for {
				mu.Lock()
				n := len(acked)
				mu.Unlock()
				if n >= target || running.Load() == 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			cut.Store(true)
			// The disk as the power cut leaves it: what was fsynced by now.
			after := fs.CrashClone(vfs.CrashCloneCfg{})
			wg.Wait()
			s.close()

			s = openStack(t, after)
			defer s.close()
			require.NotEmpty(t, acked, "no write was acknowledged before the cut")
			for key, val := range acked {
				it, ok, err := s.kv.Get([]byte(key))
				require.NoError(t, err)
				require.True(t, ok, "acknowledged write %s lost", key)
				require.Equal(t, val, string(it.Value), "acknowledged write %s has another value", key)
			}
			t.Logf("%d acknowledged writes before the cut, all recovered", len(acked))
		})
	}
}
