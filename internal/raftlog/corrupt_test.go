package raftlog

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Open refuses a log whose on-disk data breaks its invariants, with an
// error, never a panic.
func TestOpenDetectsCorruption(t *testing.T) {
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
			return db.Set(keyFormat, []byte{formatVersion + 1}, pebble.Sync)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, dir := newLog10(t, Options{})
			require.NoError(t, tc.damage(l.db))
			require.NoError(t, l.Close())

			_, err := Open(dir, nil, Options{})
			require.Error(t, err)
			if tc.wantCorrupt {
				require.ErrorIs(t, err, ErrCorrupt)
			} else {
				require.NotErrorIs(t, err, ErrCorrupt)
			}
			t.Log(err)
		})
	}
}
