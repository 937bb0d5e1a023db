package fsm

import (
	"bytes"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// collect backs f up at nowNs into a list.
func collect(t *testing.T, f *FSM, dir string, nowNs int64) (BackupInfo, []BackupItem) {
	t.Helper()
	var info BackupInfo
	var out []BackupItem
	err := f.Backup(filepath.Join(dir, "scratch"), nowNs, func(i BackupInfo) error { info = i; return nil }, func(it *BackupItem) error {
		out = append(out, BackupItem{Key: bytes.Clone(it.Key), Flags: it.Flags, ExpiresAt: it.ExpiresAt, Value: bytes.Clone(it.Value)})
		return nil
	})
	require.NoError(t, err)
	require.NoDirExists(t, filepath.Join(dir, "scratch"), "the checkpoint is removed")
	return info, out
}

func TestBackupThenRestore(t *testing.T) {
	dir := t.TempDir()
	f := openTest(t, filepath.Join(dir, "state"))
	a := &applier{t: t, f: f}
	withTTL := func(c command.Command, ttl int64, flags uint32) command.Command {
		c.Exptime, c.Flags = ttl, flags
		return c
	}
	a.do(withTTL(set(command.OpSet, "a", "apple"), 0, 5))
	a.do(withTTL(set(command.OpSet, "b", "banana"), 100, 7))
	a.do(withTTL(set(command.OpSet, "c", "cherry"), 1, 0)) // expired at the backup
	a.do(set(command.OpSet, "d", "date"))
	a.do(command.Command{Op: command.OpDelete, Key: []byte("d")})
	a.do(set(command.OpSet, "big", string(bytes.Repeat([]byte("v"), 4000)))) // a blob file value
	now := t0 + 2e9

	info, items := collect(t, f, dir, now)
	require.Equal(t, a.index, info.Applied)
	require.Equal(t, uint64(4), info.Items, "the store's counter includes the expired item not swept yet")
	require.Equal(t, []BackupItem{
		{Key: []byte("a"), Flags: 5, Value: []byte("apple")},
		{Key: []byte("b"), Flags: 7, ExpiresAt: t0 + 100e9, Value: []byte("banana")},
		{Key: []byte("big"), Value: bytes.Repeat([]byte("v"), 4000)},
	}, items)
	require.NoError(t, f.Close())

	restored := filepath.Join(dir, "restored")
	i := 0
	n, err := Restore(restored, slog.New(slog.NewTextHandler(io.Discard, nil)), RestoreOptions{Applied: info.Applied, StoredAt: now}, func() (*BackupItem, error) {
		if i == len(items) {
			return nil, io.EOF
		}
		i++
		return &items[i-1], nil
	})
	require.NoError(t, err)
	require.Equal(t, uint64(3), n)

	g := openTest(t, restored)
	defer g.Close()
	require.Equal(t, info.Applied, g.AppliedIndex())
	require.Equal(t, int64(3), g.Stats().Items)
	for _, want := range items {
		got, ok, err := g.Get(want.Key, now)
		require.NoError(t, err)
		require.True(t, ok, "%s", want.Key)
		require.Equal(t, want.Flags, got.Flags)
		require.Equal(t, want.ExpiresAt, got.ExpiresAt)
		require.Equal(t, want.Value, got.Value)
		require.Equal(t, info.Applied, got.CAS)
	}
	// The restored TTL is indexed: the sweep finds it once it is due.
	due, err := g.ExpiredBefore((t0+100e9)/1e9, 10)
	require.NoError(t, err)
	require.Equal(t, []command.KeyCAS{{Key: []byte("b"), CAS: info.Applied}}, due)
	// And the log goes on from the restored index.
	b := &applier{t: t, f: g, index: info.Applied}
	require.Equal(t, command.StatusStored, b.do(set(command.OpSet, "e", "elder")).Status)
}

func TestRestoreRefusesAnExistingDir(t *testing.T) {
	dir := t.TempDir()
	_, err := Restore(dir, slog.New(slog.NewTextHandler(io.Discard, nil)), RestoreOptions{Applied: 1}, func() (*BackupItem, error) { return nil, io.EOF })
	require.ErrorContains(t, err, "exists")
}
