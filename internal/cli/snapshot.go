package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvd-project/kvd/internal/backup"
	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/node"
	"github.com/kvd-project/kvd/internal/snapfile"
)

// snapshotOptions are the flags of `kvd snapshot …`.
type snapshotOptions struct {
	endpoints string
	json      bool
	timeout   time.Duration
	progress  time.Duration
	// dir and keep: save into a directory under a time-stamped name
	// (backup.DirName) and prune it to the newest keep (0: keep all).
	dir     string
	keep    int
	restore config.Config
	// sec are save's TLS and --user flags.
	sec clientSecurity
}

func newSnapshotCmd() *cobra.Command {
	o := &snapshotOptions{restore: config.Default()}
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a running cluster to a file, check a backup, restore one into a new cluster (docs/backup.md)",
	}
	save := &cobra.Command{
		Use:   "save FILE | --dir DIR [--keep N]",
		Short: "Save a consistent snapshot of the data from a member: every write acknowledged before it starts is in it",
		Example: `  kvd snapshot save backup.kvdsnap --endpoints http://127.0.0.1:11280
  kvd snapshot save --dir /backup --keep 7 --endpoints http://kvd-0.kvd:11280   # kvd-<UTC time>.kvdsnap, newest 7 kept`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, err := o.saveTarget(args, time.Now())
			if err != nil {
				return err
			}
			return o.save(cmd, file)
		},
	}
	save.Flags().StringVar(&o.dir, "dir", "", "save into this directory as kvd-<UTC time>.kvdsnap instead of FILE (for scheduled jobs)")
	save.Flags().IntVar(&o.keep, "keep", 0, "with --dir: after a successful save, remove the oldest kvd-<time>.kvdsnap files beyond the newest N (0: keep all)")
	save.Flags().StringVar(&o.endpoints, "endpoints", "http://127.0.0.1:11280", "HTTP address of the member to save from (the first of a comma-separated list)")
	save.Flags().DurationVar(&o.timeout, "timeout", 0, "bound on the whole save (0: none)")
	save.Flags().DurationVar(&o.progress, "progress-interval", 2*time.Second, "how often progress is printed to stderr")
	save.Flags().BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	o.sec.bind(save.Flags())

	status := &cobra.Command{
		Use:   "status FILE",
		Short: "Print a snapshot file's header and counts, and verify its checksum (non-zero exit on damage)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return o.status(cmd, args[0]) },
	}
	status.Flags().BoolVar(&o.json, "json", false, "print JSON")

	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Build a new member's data dir from a snapshot file; every member of the new cluster restores the same file",
		Example: `  kvd snapshot restore backup.kvdsnap --data-dir /var/lib/kvd/n1 --name n1 \
      --initial-cluster n1=10.0.0.1:11290,n2=10.0.0.2:11290,n3=10.0.0.3:11290
  kvd serve --data-dir /var/lib/kvd/n1 --name n1 --initial-cluster n1=…,n2=…,n3=… …`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.restoreFile(cmd, args[0]) },
	}
	restore.Flags().StringVar(&o.restore.DataDir, "data-dir", "", "the new member's data dir: absent or empty")
	restore.Flags().StringVar(&o.restore.Name, "name", o.restore.Name, "the new member's name")
	restore.Flags().StringVar(&o.restore.InitialCluster, "initial-cluster", "", "the new cluster's members, name=peer-host:port,… (the same on every member)")
	restore.Flags().StringVar(&o.restore.InitialWitnesses, "initial-witnesses", "", "the members of --initial-cluster that are witnesses (they get no items)")
	restore.Flags().BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	cmd.AddCommand(save, status, restore)
	return cmd
}

// saveTarget is the file a save writes: FILE, or with --dir a name for
// now in DIR.
func (o *snapshotOptions) saveTarget(args []string, now time.Time) (string, error) {
	switch {
	case o.keep < 0:
		return "", fmt.Errorf("--keep %d: want 0 (keep all) or more", o.keep)
	case o.dir != "" && len(args) > 0:
		return "", errors.New("snapshot save: give FILE or --dir, not both")
	case o.dir != "":
		return filepath.Join(o.dir, backup.DirName(now)), nil
	case len(args) == 0:
		return "", errors.New("snapshot save: give FILE, or --dir DIR to name files by time")
	case o.keep > 0:
		return "", errors.New("--keep prunes a --dir: give --dir DIR instead of FILE")
	}
	return args[0], nil
}

func (o *snapshotOptions) save(cmd *cobra.Command, file string) error {
	endpoint := strings.TrimSpace(strings.Split(o.endpoints, ",")[0])
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return fmt.Errorf("--endpoints: %q is not an HTTP address (http://host:port)", config.RedactURL(endpoint))
	}
	auth, err := o.sec.http()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if o.timeout > 0 {
		var cancel func()
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	errOut := cmd.ErrOrStderr()
	tty := isTerminal(errOut)
	opts := backup.SaveOptions{Endpoint: endpoint, File: file, ProgressEvery: o.progress, Client: auth.asClient(),
		Progress: func(p backup.Progress) { printProgress(errOut, tty, p) }}
	if tty {
		opts.ProgressEvery = 200 * time.Millisecond
	}
	sum, err := backup.Save(ctx, opts)
	if tty {
		fmt.Fprintln(errOut)
	}
	if err != nil {
		return err
	}
	if o.dir != "" {
		// Only after a save succeeded: a failing job must not eat the
		// backups it failed to replace.
		removed, err := backup.Prune(o.dir, o.keep)
		for _, r := range removed {
			fmt.Fprintf(errOut, "snapshot save: pruned %s\n", r)
		}
		if err != nil {
			return fmt.Errorf("saved %s, but: %w", sum.File, err)
		}
	}
	if o.json {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(sum)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "saved %s: %d items (%d value bytes, %d file bytes) from %s at applied index %d in %.2fs (%.1f MB/s)\n",
		sum.File, sum.Items, sum.ValueBytes, sum.FileBytes, sum.Member, sum.Applied, sum.Seconds, sum.MBPerSecond)
	return err
}

func printProgress(w io.Writer, tty bool, p backup.Progress) {
	pct := ""
	if p.ItemsEstimate > 0 {
		pct = fmt.Sprintf(" (%.0f%%)", 100*float64(min(p.Items, p.ItemsEstimate))/float64(p.ItemsEstimate))
	}
	rate := float64(p.Bytes) / 1e6 / max(p.Elapsed.Seconds(), 1e-9)
	if tty {
		fmt.Fprintf(w, "\r%d/%d items%s, %.1f MB, %.1f MB/s   ", p.Items, p.ItemsEstimate, pct, float64(p.Bytes)/1e6, rate)
		return
	}
	fmt.Fprintf(w, "snapshot save: %d of at most %d items%s, %.1f MB, %.1f MB/s\n", p.Items, p.ItemsEstimate, pct, float64(p.Bytes)/1e6, rate)
}

// statusJSON is `kvd snapshot status --json`.
type statusJSON struct {
	File           string `json:"file"`
	OK             bool   `json:"ok"`
	Error          string `json:"error,omitempty"`
	FormatVersion  uint16 `json:"format_version"`
	KVDVersion     string `json:"kvd_version"`
	ClusterID      string `json:"cluster_id"`
	Member         string `json:"member"`
	Applied        uint64 `json:"applied_index"`
	Term           uint64 `json:"term"`
	ClusterVersion uint64 `json:"cluster_version"`
	Created        string `json:"created"`
	Items          uint64 `json:"items"`
	ValueBytes     uint64 `json:"value_bytes"`
	FileBytes      int64  `json:"file_bytes"`
	CRC32C         string `json:"crc32c"`
}

func (o *snapshotOptions) status(cmd *cobra.Command, file string) error {
	h, tr, size, err := backup.Status(file)
	s := statusJSON{File: file, OK: err == nil, FormatVersion: snapfile.Version, KVDVersion: h.KVDVersion,
		ClusterID: fmt.Sprintf("%x", h.ClusterID), Member: h.Member, Applied: h.Applied, Term: h.Term, ClusterVersion: h.ClusterVersion,
		Created: time.Unix(0, h.CreatedNs).UTC().Format(time.RFC3339Nano), Items: tr.Items, ValueBytes: tr.ValueBytes,
		FileBytes: size, CRC32C: fmt.Sprintf("%08x", tr.CRC)}
	if err != nil {
		s.Error = err.Error()
	}
	out := cmd.OutOrStdout()
	if o.json {
		if jerr := json.NewEncoder(out).Encode(s); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("snapshot status: %w", err)
	}
	_, err = fmt.Fprintf(out, "file:            %s (%d bytes)\nformat:          %d\nkvd version:     %s\ncluster id:      %s\nmember:          %s\n"+
		"applied index:   %d\nterm:            %d\ncluster version: %d\ncreated:         %s\nitems:           %d\nvalue bytes:     %d\ncrc32c:          %s (ok)\n",
		file, size, s.FormatVersion, s.KVDVersion, s.ClusterID, s.Member, s.Applied, s.Term, s.ClusterVersion, s.Created, s.Items, s.ValueBytes, s.CRC32C)
	return err
}

func (o *snapshotOptions) restoreFile(cmd *cobra.Command, file string) error {
	if o.restore.InitialCluster == "" {
		return errors.New("snapshot restore: --initial-cluster is required: the new cluster's members, the same on every member")
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	errOut := cmd.ErrOrStderr()
	res, err := node.Restore(node.RestoreOptions{File: file, Config: o.restore,
		Progress: func(n uint64) { fmt.Fprintf(errOut, "snapshot restore: %d items written\n", n) }}, logger)
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{
			"data_dir": o.restore.DataDir, "name": o.restore.Name, "witness": res.Witness, "items": res.Items,
			"applied_index": res.Header.Applied, "from_cluster_id": fmt.Sprintf("%x", res.Header.ClusterID),
			"cluster_id": fmt.Sprintf("%x", res.ClusterID), "duration_seconds": res.Duration.Seconds(),
		})
	}
	what := fmt.Sprintf("%d items", res.Items)
	if res.Witness {
		what = "a witness (no items)"
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s for member %s of new cluster %x (from cluster %x at index %d) in %.2fs; start it with:\n  kvd serve --name %s --data-dir %s --initial-cluster %s …\n",
		what, o.restore.DataDir, o.restore.Name, res.ClusterID, res.Header.ClusterID, res.Header.Applied, res.Duration.Seconds(),
		o.restore.Name, o.restore.DataDir, o.restore.InitialCluster)
	return err
}
