package fsm

import (
	"bytes"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// gateFS holds the first rename of dir (InstallSnapshot moving the current
// state aside, under the store's write lock) until release is closed.
type gateFS struct {
	vfs.FS
	dir     string
	entered chan struct{}
	release chan struct{}
}

func (g *gateFS) Rename(oldname, newname string) error {
	if oldname == g.dir && g.entered != nil {
		close(g.entered)
		g.entered = nil
		<-g.release
	}
	return g.FS.Rename(oldname, newname)
}

// awaitBlockedReader returns once a goroutine is waiting for the store's
// read lock inside fn (a method of FSM), or fails t at the deadline.
func awaitBlockedReader(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		n := runtime.Stack(buf, true)
		for _, g := range bytes.Split(buf[:n], []byte("\n\n")) {
			if bytes.Contains(g, []byte("RWMutex).RLock")) && bytes.Contains(g, []byte("(*FSM)."+fn+"(")) {
				return
			}
		}
	}
	t.Fatalf("no reader blocked on the store lock in %s", fn)
}

// TestReadDuringInstallUsesTheInstalledHorizon: a read that starts while a
// snapshot install holds the store must judge the installed items by the
// installed state's delayed flush_all horizon. It read the horizon before
// waiting for the install, so an item the received state hides (stored
// before a horizon that has passed, not yet crawled away) came back, and
// one it shows could be hidden by the old state's horizon.
func TestReadDuringInstallUsesTheInstalledHorizon(t *testing.T) {
	for _, read := range []struct {
		fn   string
		read func(f *FSM, now int64) (bool, error)
	}{
		{"Get", func(f *FSM, now int64) (bool, error) {
			_, ok, err := f.Get([]byte("k"), now)
			return ok, err
		}},
		{"ScanPage", func(f *FSM, now int64) (bool, error) {
			items, _, err := f.ScanPage([]byte("k"), nil, 10, now)
			return len(items) > 0, err
		}},
	} {
		t.Run(read.fn, func(t *testing.T) {
			root := t.TempDir()
			// The sender: k stored, then a delayed flush_all whose horizon
			// (t0+1s) has passed at the read (t0+2s).
			ref := openTest(t, filepath.Join(root, "ref"))
			defer ref.Close()
			ra := &applier{t: t, f: ref}
			ra.do(set(command.OpSet, "k", "v"))
			ra.do(command.Command{Op: command.OpFlush, Delay: 1})
			const now = t0 + 2e9
			ok, err := read.read(ref, now)
			require.NoError(t, err)
			require.False(t, ok, "hidden on the sender")
			ck := filepath.Join(root, "ck")
			applied, err := ref.Checkpoint(ck)
			require.NoError(t, err)

			// The receiver has applied nothing: no horizon.
			dir := filepath.Join(root, "sut")
			gate := &gateFS{FS: vfs.Default, dir: dir}
			sut, err := Open(dir, discardLogger(), Options{FS: gate})
			require.NoError(t, err)
			defer sut.Close()

			gate.entered, gate.release = make(chan struct{}), make(chan struct{})
			entered := gate.entered
			installed := make(chan error, 1)
			go func() { installed <- sut.InstallSnapshot(ck, applied) }()
			<-entered // the install holds the store
			type answer struct {
				ok  bool
				err error
			}
			got := make(chan answer, 1)
			go func() {
				ok, err := read.read(sut, now)
				got <- answer{ok, err}
			}()
			awaitBlockedReader(t, read.fn)
			close(gate.release)
			require.NoError(t, <-installed)
			a := <-got
			require.NoError(t, a.err)
			require.False(t, a.ok, "a read during the install showed what the installed flush_all hides")
		})
	}
}
