package migrate

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/kvd-project/kvd/internal/backup"
	"github.com/kvd-project/kvd/internal/snapfile"
)

// ExportOptions configures Export.
type ExportOptions struct {
	// Endpoint is a data member's HTTP address (http://host:port).
	Endpoint string
	// Client makes the request (default: http.DefaultClient).
	Client *http.Client
	// Out is the file written; it is written as Out+".part", fsynced and
	// renamed once whole.
	Out string
	// Progress, if set, is called every ProgressEvery with the items and
	// value bytes written so far.
	Progress      func(items, bytes uint64, elapsed time.Duration)
	ProgressEvery time.Duration
}

// ExportSummary describes a written export (`--json` prints it).
type ExportSummary struct {
	File        string  `json:"file"`
	Member      string  `json:"member"`
	ClusterID   string  `json:"cluster_id"`
	Applied     uint64  `json:"applied_index"`
	Items       uint64  `json:"items"`
	ValueBytes  uint64  `json:"value_bytes"`
	FileBytes   int64   `json:"file_bytes"`
	Seconds     float64 `json:"duration_seconds"`
	MBPerSecond float64 `json:"mb_per_second"`
}

// Export writes the items of a consistent snapshot of the member at
// opts.Endpoint (the one `kvd snapshot save` takes: every write
// acknowledged before it started is in it) to opts.Out in the export
// format. The snapshot is streamed through, never held whole. On any
// error the partial file is removed: a file under the final name is
// always whole.
func Export(ctx context.Context, opts ExportOptions) (sum ExportSummary, err error) {
	start := time.Now()
	part := opts.Out + ".part"
	f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(part)
		}
	}()
	var w *ExportWriter
	last := time.Now()
	h, tr, err := backup.Stream(ctx, opts.Endpoint, opts.Client, func(h snapfile.Header, r snapfile.Record) error {
		if w == nil {
			var err error
			if w, err = NewExportWriter(f, exportHeader(h)); err != nil {
				return fmt.Errorf("write %s: %w", part, err)
			}
		}
		if err := w.Add(ExportRecord{Key: r.Key, Flags: r.Flags, Exptime: unixCeil(r.ExpiresAt), Value: r.Value}); err != nil {
			return fmt.Errorf("write %s: %w", part, err)
		}
		sum.ValueBytes += uint64(len(r.Value))
		if opts.Progress != nil && time.Since(last) >= opts.ProgressEvery {
			last = time.Now()
			opts.Progress(w.items, sum.ValueBytes, time.Since(start))
		}
		return nil
	})
	if err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	if w == nil { // an empty store: no record called back
		if w, err = NewExportWriter(f, exportHeader(h)); err != nil {
			return sum, fmt.Errorf("export: write %s: %w", part, err)
		}
	}
	if sum.Items, err = w.Close(); err != nil {
		return sum, fmt.Errorf("export: write %s: %w", part, err)
	}
	if sum.Items != tr.Items {
		return sum, fmt.Errorf("export: wrote %d items of the snapshot's %d", sum.Items, tr.Items)
	}
	if err := f.Sync(); err != nil {
		return sum, fmt.Errorf("export: fsync %s: %w", part, err)
	}
	st, err := f.Stat()
	if err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	if err := f.Close(); err != nil {
		return sum, fmt.Errorf("export: close %s: %w", part, err)
	}
	if err := os.Rename(part, opts.Out); err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	if err := syncDir(filepath.Dir(opts.Out)); err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	d := time.Since(start)
	sum.File, sum.Member, sum.ClusterID, sum.Applied = opts.Out, h.Member, fmt.Sprintf("%x", h.ClusterID), h.Applied
	sum.FileBytes, sum.Seconds = st.Size(), d.Seconds()
	sum.MBPerSecond = float64(st.Size()) / 1e6 / max(d.Seconds(), 1e-9)
	return sum, nil
}

func exportHeader(h snapfile.Header) ExportHeader {
	return ExportHeader{KVDVersion: h.KVDVersion, Member: h.Member, ClusterID: fmt.Sprintf("%x", h.ClusterID),
		Applied: h.Applied, Created: time.Unix(0, h.CreatedNs).UTC().Format(time.RFC3339Nano)}
}

// unixCeil is an expiry in Unix ns as the whole second at or after it, so
// an exported item never expires earlier than it would have; 0 stays 0.
func unixCeil(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (ns + int64(time.Second) - 1) / int64(time.Second)
}

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
