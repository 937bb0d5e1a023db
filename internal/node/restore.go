package node

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/membership"
	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/snapfile"
)

// RestoreOptions says what `kvd snapshot restore` builds.
type RestoreOptions struct {
	// File is the backup file (snapfile).
	File string
	// Config gives the member: Name, DataDir (empty or absent), and the new
	// cluster's InitialCluster and InitialWitnesses, the same on every
	// member.
	Config config.Config
	// Progress, if set, is called now and then with the items written.
	Progress func(items uint64)
}

// RestoreResult describes a data dir Restore built.
type RestoreResult struct {
	Header  snapfile.Header
	Trailer snapfile.Trailer
	// Items is how many items the member's store holds (0 for a witness).
	Items     uint64
	ClusterID uint64
	Witness   bool
	Duration  time.Duration
}

// Restore builds a data dir for one founding member of a new cluster from
// a backup, as `etcdutl snapshot restore` does (docs/backup.md). Every
// member of the new cluster restores the same file with the same
// --initial-cluster and --initial-witnesses, and so starts from the same
// state:
//
//   - state/ holds the backup's items as of its applied index I (a
//     witness's witness/ holds none);
//   - raft/ is a log whose compaction point is I, at term 1, with the new
//     members as its voters and I committed: the same prefix on every
//     member, so the first leader appends at I+1 and nobody replays
//     anything;
//   - cluster.json names the new members under a new cluster ID, derived
//     from the members and the backup (membership.CreateRestored).
//
// The file is read through and checked before anything is written, and the
// dir is built beside DataDir and renamed into place once whole: a damaged
// file, a full disk or a crash leaves no half-restored data dir that
// `kvd serve` would start.
func Restore(opts RestoreOptions, logger *slog.Logger) (RestoreResult, error) {
	start := time.Now()
	cfg := opts.Config
	var res RestoreResult
	members, err := cfg.Members()
	if err != nil {
		return res, err
	}
	witnesses, err := cfg.Witnesses(members)
	if err != nil {
		return res, err
	}
	if !slices.ContainsFunc(members, func(m config.Member) bool { return m.Name == cfg.Name }) {
		return res, fmt.Errorf("initial-cluster %q does not name this member %q", cfg.InitialCluster, cfg.Name)
	}
	res.Witness = witnesses[cfg.Name]
	if err := checkEmptyDir(cfg.DataDir); err != nil {
		return res, err
	}
	// First pass: the whole file, checksum and all, before anything is built.
	h, tr, err := verifyFile(opts.File)
	if err != nil {
		return res, err
	}
	res.Header, res.Trailer = h, tr

	staging := filepath.Clean(cfg.DataDir) + ".restoring"
	if err := os.RemoveAll(staging); err != nil {
		return res, fmt.Errorf("restore: remove the leftover %s of an interrupted restore: %w", staging, err)
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return res, fmt.Errorf("restore: create %s: %w", staging, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(staging)
		}
	}()
	applied := max(h.Applied, 1)
	if res.Items, err = restoreState(opts, filepath.Join(staging, storeDir(res.Witness)), applied, h.CreatedNs, res.Witness, logger); err != nil {
		return res, err
	}
	voters := make([]uint64, 0, len(members))
	for _, m := range members {
		voters = append(voters, uint64(IDOf(m.Name)))
	}
	slices.Sort(voters)
	if err := restoreLog(filepath.Join(staging, "raft"), applied, voters, logger); err != nil {
		return res, err
	}
	ms, err := membership.CreateRestored(cfg, staging, membership.Restored{FromClusterID: h.ClusterID, Index: applied, CRC: tr.CRC})
	if err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	res.ClusterID = ms.ClusterID
	// An empty DataDir (checked above) gives way to the built one.
	if err := os.Remove(cfg.DataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("restore: %w", err)
	}
	if err := os.Rename(staging, cfg.DataDir); err != nil {
		return res, fmt.Errorf("restore: move %s into place: %w", staging, err)
	}
	ok = true
	if err := syncDir(filepath.Dir(filepath.Clean(cfg.DataDir))); err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	res.Duration = time.Since(start)
	return res, nil
}

// checkEmptyDir refuses a data dir that holds anything: a restore founds
// a member, never overwrites one.
func checkEmptyDir(dir string) error {
	if dir == "" {
		return errors.New("restore: --data-dir is required")
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore: read data dir %s: %w", dir, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("restore: data dir %s is not empty (it holds %s): restore builds a new member's data dir; give an empty or absent one", dir, ents[0].Name())
	}
	return nil
}

func verifyFile(path string) (snapfile.Header, snapfile.Trailer, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapfile.Header{}, snapfile.Trailer{}, fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	h, tr, err := snapfile.Verify(f, nil)
	if err != nil {
		return h, tr, fmt.Errorf("restore: %s: %w", path, err)
	}
	return h, tr, nil
}

// restoreState writes the state store from a second pass over the file;
// a witness's gets no items.
func restoreState(opts RestoreOptions, dir string, applied uint64, createdNs int64, witness bool, logger *slog.Logger) (uint64, error) {
	f, err := os.Open(opts.File)
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	r, err := snapfile.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("restore: %s: %w", opts.File, err)
	}
	var n uint64
	var item fsm.BackupItem
	next := func() (*fsm.BackupItem, error) {
		if witness {
			return nil, io.EOF
		}
		rec, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("restore: %s: %w", opts.File, err)
			}
			return nil, err
		}
		n++
		if opts.Progress != nil && n%100000 == 0 {
			opts.Progress(n)
		}
		item = fsm.BackupItem{Key: rec.Key, Flags: rec.Flags, ExpiresAt: rec.ExpiresAt, Value: rec.Value}
		return &item, nil
	}
	items, err := fsm.Restore(dir, logger.With("component", "fsm"), fsm.RestoreOptions{Applied: applied, StoredAt: createdNs}, next)
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	return items, nil
}

// restoreLog writes a raft log that starts after index applied at term 1,
// with voters as its configuration and applied committed.
func restoreLog(dir string, applied uint64, voters []uint64, logger *slog.Logger) error {
	l, err := raftlog.Open(dir, logger.With("component", "raftlog"), raftlog.Options{})
	if err != nil {
		return fmt.Errorf("restore: open raft log: %w", err)
	}
	term := uint64(1)
	meta := &pb.SnapshotMetadata{Index: &applied, Term: &term, ConfState: &pb.ConfState{Voters: voters}}
	err = l.ApplySnapshot(meta)
	if err == nil {
		err = l.Save(&pb.HardState{Term: &term, Commit: &applied}, nil)
	}
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restore: write raft log: %w", err)
	}
	return nil
}

// syncDir makes the entries of dir durable (the rename into it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
