package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/snapfile"
	"github.com/kvd-project/kvd/internal/version"
)

// backupSource serves GET /v1/snapshot (httpapi.Snapshots): a linearizable
// read barrier, then the items of a checkpoint of the state store, encoded
// as a backup file (snapfile) onto the response.
type backupSource struct {
	n    *Node
	seq  *atomic.Uint64 // names each backup's checkpoint directory
	temp string         // where checkpoints go: the data dir, beside state/
}

// backupScratchPrefix starts the name of a backup's checkpoint directory.
const backupScratchPrefix = "backup-checkpoint-"

// newBackupSource removes the checkpoints a crash left behind (no backup
// runs before the node serves HTTP): each holds hard links to sstables the
// store may have compacted away, which would otherwise stay on disk.
func newBackupSource(n *Node) backupSource {
	leftovers, _ := filepath.Glob(filepath.Join(n.cfg.DataDir, backupScratchPrefix+"*"))
	for _, d := range leftovers {
		if err := os.RemoveAll(d); err != nil {
			n.logger.Warn("could not remove a backup checkpoint left by a crash", "dir", d, "err", err)
		}
	}
	return backupSource{n: n, seq: new(atomic.Uint64), temp: n.cfg.DataDir}
}

// WriteSnapshot implements httpapi.Snapshots.
func (s backupSource) WriteSnapshot(ctx context.Context, begin func(), w io.Writer) error {
	// Every write acknowledged before this request was applied on the
	// leader and committed; the barrier returns once this member has
	// applied everything committed before it asked (ReadIndex), and the
	// checkpoint below holds everything applied by then.
	bctx, cancel := context.WithTimeout(ctx, s.n.cfg.RequestTimeout)
	err := s.n.kv.Barrier(bctx, kv.Linearizable)
	cancel()
	if err != nil {
		return fmt.Errorf("snapshot: read barrier: %w", err)
	}
	st := s.n.rep.Status()
	now := time.Now()
	scratch := filepath.Join(s.temp, fmt.Sprintf("%s%d-%d", backupScratchPrefix, os.Getpid(), s.seq.Add(1)))
	var sw *snapfile.Writer
	var rec snapfile.Record
	start := func(info fsm.BackupInfo) error {
		begin()
		var err error
		sw, err = snapfile.NewWriter(w, snapfile.Header{
			KVDVersion: version.Version, ClusterID: s.n.members.ClusterID(), Member: s.n.cfg.Name,
			Applied: info.Applied, Term: st.Term, ClusterVersion: info.ClusterVersion, CreatedNs: now.UnixNano(),
			ItemsEstimate: info.Items, BytesEstimate: info.Bytes,
		})
		return err
	}
	each := func(it *fsm.BackupItem) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		rec = snapfile.Record{Key: it.Key, Flags: it.Flags, ExpiresAt: it.ExpiresAt, Value: it.Value}
		return sw.Add(rec)
	}
	if err := s.n.state.Backup(scratch, now.UnixNano(), start, each); err != nil {
		return err
	}
	tr, err := sw.Close()
	if err != nil {
		return err
	}
	s.n.logger.Info("served a snapshot", "items", tr.Items, "value_bytes", tr.ValueBytes, "took", time.Since(now))
	return nil
}
