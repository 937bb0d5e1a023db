package raftlog

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-project/kvd/internal/durable"
)

// writePebbleLog10 writes, in dir, the log newLog10 makes, the way format
// version 1 kept it in Pebble, and returns the open Pebble instance.
func writePebbleLog10(t *testing.T, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatVirtualSSTables, Logger: durable.NewPebbleLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	set := func(k []byte, m proto.Message) {
		v, err := proto.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, db.Set(k, v, pebble.Sync))
	}
	require.NoError(t, db.Set(keyFormat, []byte{pebbleFormatVersion}, pebble.Sync))
	set(keyHardState, hardState(2, 1, 3))
	set(keyCompaction, snapMeta(3, 1, confState(1)))
	for _, e := range append(entries(4, 5, 1), entries(6, 10, 2)...) {
		set(entryKey(e.GetIndex()), e)
	}
	return db
}

// A log kept in Pebble by format version 1 is converted to segment files
// on Open, whole, and Pebble's files are removed.
func TestOpenConvertsAPebbleLog(t *testing.T) {
	want, _ := newLog10(t, Options{})
	wantState := captureState(t, want)

	dir := t.TempDir()
	require.NoError(t, writePebbleLog10(t, dir).Close())
	l, err := Open(dir, nil, Options{})
	require.NoError(t, err)
	requireSameState(t, wantState, captureState(t, l))
	names, err := vfs.Default.List(dir)
	require.NoError(t, err)
	for _, name := range names {
		require.False(t, isPebbleFile(name), "%s left in the log directory", name)
	}
	// It goes on from there, and reopens as written.
	require.NoError(t, l.Save(hardState(2, 1, 10), entries(11, 12, 2)))
	wantState = captureState(t, l)
	require.NoError(t, l.Close())
	l = reopenTest(t, dir, Options{})
	requireSameState(t, wantState, captureState(t, l))

	// A conversion cut short (its segment not yet renamed into place) is
	// done again from the Pebble files.
	dir = t.TempDir()
	require.NoError(t, writePebbleLog10(t, dir).Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, segmentName(1)+convertSuffix), []byte("half"), 0o644))
	l = reopenTest(t, dir, Options{})
	wantState = captureState(t, want)
	requireSameState(t, wantState, captureState(t, l))

	// An empty Pebble log converts to an empty log.
	dir = t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatVirtualSSTables, Logger: durable.NewPebbleLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	l = reopenTest(t, dir, Options{})
	require.True(t, l.IsEmpty())
}

// A Pebble-kept log whose data breaks its invariants is refused, with an
// error, never a panic, and left as it was.
func TestConvertRefusesACorruptPebbleLog(t *testing.T) {
	marshal := func(m proto.Message) []byte {
		v, err := proto.Marshal(m)
		require.NoError(t, err)
		return v
	}
	truncatedProto := []byte{0x22, 0x10, 'x'} // field 4 (Data) claims 16 bytes, has 1
	tests := []struct {
		name        string
		damage      func(db *pebble.DB) error
		wantCorrupt bool // the error wraps ErrCorrupt
	}{
		{name: "missing entry in the middle", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Delete(entryKey(7), pebble.Sync)
		}},
		{name: "missing first entry", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Delete(entryKey(4), pebble.Sync)
		}},
		{name: "undecodable entry", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(entryKey(7), truncatedProto, pebble.Sync)
		}},
		{name: "entry under the wrong key", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(entryKey(7), marshal(entry(8, 2, "")), pebble.Sync)
		}},
		{name: "term going down", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(entryKey(7), marshal(entry(7, 1, "")), pebble.Sync)
		}},
		{name: "first entry term below the compaction point", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(entryKey(4), marshal(entry(4, 0, "")), pebble.Sync)
		}},
		{name: "malformed entry key", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set([]byte{prefixEntry, 1, 2}, marshal(entry(1, 1, "")), pebble.Sync)
		}},
		{name: "entry below the compaction point", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(entryKey(2), marshal(entry(2, 1, "")), pebble.Sync)
		}},
		{name: "undecodable hard state", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(keyHardState, truncatedProto, pebble.Sync)
		}},
		{name: "commit beyond the last index", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(keyHardState, marshal(hardState(2, 1, 11)), pebble.Sync)
		}},
		{name: "undecodable compaction point", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(keyCompaction, truncatedProto, pebble.Sync)
		}},
		{name: "compaction point without index", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Set(keyCompaction, marshal(&pb.SnapshotMetadata{Term: new(uint64(1)), ConfState: confState(1)}), pebble.Sync)
		}},
		{name: "format version missing", wantCorrupt: true, damage: func(db *pebble.DB) error {
			return db.Delete(keyFormat, pebble.Sync)
		}},
		{name: "format version unknown", damage: func(db *pebble.DB) error {
			return db.Set(keyFormat, []byte{pebbleFormatVersion + 1}, pebble.Sync)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := writePebbleLog10(t, dir)
			require.NoError(t, tc.damage(db))
			require.NoError(t, db.Close())

			_, err := Open(dir, nil, Options{})
			require.Error(t, err)
			if tc.wantCorrupt {
				require.ErrorIs(t, err, ErrCorrupt)
			} else {
				require.NotErrorIs(t, err, ErrCorrupt)
			}
			t.Log(err)
			_, err = os.Stat(filepath.Join(dir, segmentName(1)))
			require.ErrorIs(t, err, os.ErrNotExist, "a segment written from a corrupt log")
		})
	}
}
