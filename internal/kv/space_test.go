package kv

import (
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
		{"space freed", floor + 1, nil, false},
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
	for _, op := range []command.Op{command.OpDelete, command.OpFlush, command.OpExpire} {
		require.True(t, freesSpace(op), "%s frees space and must pass a low disk", op)
	}
}
