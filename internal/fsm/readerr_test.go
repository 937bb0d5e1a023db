package fsm

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// errBlobRead is the disk error the test injects into blob file reads.
var errBlobRead = errors.New("injected blob read error")

// TestScansReportReadErrors: a value of 1 KiB or more lives in a Pebble
// blob file, read when an iterator asks for it. Pebble's Value() hides a
// failed read as a nil value, and the scans then reported "decode item:
// bad header", or hashed the nil into a digest, where the disk had
// failed: an operator would look for corruption that is not there, and a
// digest would differ from its replicas' for no reason of state.
func TestScansReportReadErrors(t *testing.T) {
	var failing atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsRead && strings.HasSuffix(op.Path, ".blob") {
			return errBlobRead
		}
		return nil
	}))
	f, err := Open("/state", discardLogger(), Options{FS: fs, CacheBytes: 1 << 20, FlushAfterBytes: 1 << 10})
	require.NoError(t, err)
	defer func() {
		failing.Store(false)
		require.NoError(t, f.Close())
	}()
	var ents []Entry
	for i := range 20 {
		data, err := command.Encode(nil, &command.Command{Op: command.OpSet, Key: []byte(fmt.Sprintf("key-%02d", i)),
			Value: []byte(strings.Repeat("v", 4<<10)), Stamp: t0})
		require.NoError(t, err)
		ents = append(ents, Entry{Index: uint64(i + 1), Data: data})
	}
	_, err = f.Apply(ents)
	require.NoError(t, err)
	_, err = f.Sync()
	require.NoError(t, err)
	require.Equal(t, uint64(20), syncUntil(t, f, 20), "the values never reached blob files")

	failing.Store(true)
	_, err = f.Scan([]byte("key-"), nil, 100, t0)
	require.ErrorIs(t, err, errBlobRead, "scan")
	_, _, err = f.HiddenAfter(nil, 100, 1<<20, t0)
	require.ErrorIs(t, err, errBlobRead, "crawl")
	_, err = f.Digest()
	require.ErrorIs(t, err, errBlobRead, "digest")
}
