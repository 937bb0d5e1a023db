package kv

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// TestSpaceGuard walks the free space of a disk down past the floor and
// back up, and checks when the guard refuses writes: below the floor only,
// not when it cannot measure, and no longer once space is back.
func TestSpaceGuard(t *testing.T) {
	const floor = 64 << 20
	var free uint64
	var freeErr error
	g := NewSpaceGuard(floor, func() (uint64, error) { return free, freeErr }, slog.New(slog.DiscardHandler))
	svc := New(Config{RequestTimeout: time.Second, MaxItemSize: 1 << 20}, nil, nil, slog.New(slog.DiscardHandler), time.Now)
	svc.GuardSpace(g)
	for _, step := range []struct {
		name    string
		free    uint64
		err     error
		wantLow bool
	}{
		{"plenty", 10 << 30, nil, false},
		{"at the floor", floor, nil, false},
		{"one byte under", floor - 1, nil, true},
		{"full", 0, nil, true},
		{"unmeasurable keeps the last word", 10 << 30, errors.New("statfs: EIO"), true},
		// Hysteresis: a disk hovering at the floor must not flip the guard
		// every second; it lifts an eighth of the floor above it.
		{"just above the floor", floor + 1, nil, true},
		{"under the margin", floor + floor/8 - 1, nil, true},
		{"space freed", floor + floor/8, nil, false},
		{"above the floor, under the margin, once lifted", floor + 1, nil, false},
		{"at the floor once lifted", floor, nil, false},
		{"unmeasurable while fine", 0, errors.New("statfs: EIO"), false},
	} {
		free, freeErr = step.free, step.err
		g.Check()
		require.Equal(t, step.wantLow, g.Low(), step.name)
		if !step.wantLow {
			continue
		}
		// While low, every write that adds data is refused before it
		// reaches the log (this service has no replica: a write that got
		// past the guard would crash the test).
		for _, op := range []command.Op{command.OpSet, command.OpAdd, command.OpReplace, command.OpAppend,
			command.OpPrepend, command.OpCAS, command.OpIncr, command.OpDecr, command.OpTouch, command.OpGAT} {
			_, err := svc.Submit(context.Background(), &command.Command{Op: op, Key: []byte("k"), Value: []byte("v")})
			require.ErrorIs(t, err, ErrNoSpace, "%s: %s", step.name, op)
		}
	}
}

// TestPassesLowDisk: what frees space, and a member's address row, which a
// node must publish to be reachable at all, pass a low disk; every write that
// adds or rewrites an item does not.
func TestPassesLowDisk(t *testing.T) {
	for op, want := range map[command.Op]bool{
		command.OpDelete: true, command.OpFlush: true, command.OpExpire: true, command.OpMember: true, command.OpClusterVersion: true,
		command.OpSet: false, command.OpAdd: false, command.OpReplace: false, command.OpAppend: false,
		command.OpPrepend: false, command.OpCAS: false, command.OpIncr: false, command.OpDecr: false,
		command.OpTouch: false, command.OpGAT: false,
		command.OpMetaDelete: true, command.OpMetaStore: false, command.OpMetaArith: false, command.OpMetaGet: false,
		command.OpAccess: false,
	} {
		require.Equal(t, want, passesLowDisk(op), "%s", op)
	}
}

// TestSpaceGuardBlindLog: the warning for a failed measurement says what the
// guard keeps doing, which depends on its last reading: it claimed writes
// were not refused even while it went on refusing them.
func TestSpaceGuardBlindLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		free uint64
		want string
	}{
		{"fine", 1 << 30, "writes are not refused meanwhile"},
		{"low", 0, "writes stay refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			var freeErr error
			g := NewSpaceGuard(1<<20, func() (uint64, error) { return tc.free, freeErr }, slog.New(slog.NewTextHandler(&buf, nil)))
			g.Check()
			freeErr = errors.New("statfs: EIO")
			g.Check()
			require.Contains(t, buf.String(), tc.want)
		})
	}
}
