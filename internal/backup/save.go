// Package backup is the client side of `kvd snapshot save` and `status`
// (docs/backup.md): it fetches a member's snapshot stream (GET
// /v1/snapshot) into a file, checking the stream with snapfile's reader as
// it arrives, and never leaves a partial file under the final name. The
// CLI calls it from its command's goroutine; the restore itself is
// node.Restore, which builds data dirs.
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvd-project/kvd/internal/snapfile"
)

// SaveOptions configures Save.
type SaveOptions struct {
	// Endpoint is a member's HTTP address (http://host:port).
	Endpoint string
	// File is where the snapshot goes; it is written as File+".part" and
	// renamed once whole and synced.
	File string
	// Client makes the request (default: http.DefaultClient).
	Client *http.Client
	// Progress, if set, is called every ProgressEvery with what has arrived.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Progress is how far a save has come.
type Progress struct {
	Items, Bytes uint64
	// ItemsEstimate is the header's bound on the items to come.
	ItemsEstimate uint64
	Elapsed       time.Duration
}

// Summary describes a saved snapshot (`--json` prints it).
type Summary struct {
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

// Save fetches a snapshot from opts.Endpoint into opts.File. On any error
// (the member refuses or restarts, the stream ends short or is damaged,
// the disk fills) the partial file is removed and the error says why.
func Save(ctx context.Context, opts SaveOptions) (sum Summary, err error) {
	start := time.Now()
	resp, err := get(ctx, opts.Client, opts.Endpoint)
	if err != nil {
		return sum, fmt.Errorf("snapshot save: %w", err)
	}
	defer resp.Body.Close()
	part := opts.File + ".part"
	f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return sum, fmt.Errorf("snapshot save: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(part)
		}
	}()
	// What arrives goes to the file and, through the same bytes, to the
	// reader, which checks it as a whole: a stream cut short (the member
	// restarted) or damaged on the way is an error here, not a file.
	cw := &countingWriter{w: f}
	r, err := snapfile.NewReader(io.TeeReader(resp.Body, cw))
	if err != nil {
		return sum, fmt.Errorf("snapshot save from %s: %w", opts.Endpoint, err)
	}
	h := r.Header()
	last := time.Now()
	var items uint64
	for {
		_, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if cw.err != nil {
				err = cw.err
			}
			return sum, fmt.Errorf("snapshot save from %s: %w", opts.Endpoint, err)
		}
		items++
		if opts.Progress != nil && time.Since(last) >= opts.ProgressEvery {
			last = time.Now()
			opts.Progress(Progress{Items: items, Bytes: cw.n, ItemsEstimate: h.ItemsEstimate, Elapsed: time.Since(start)})
		}
	}
	if cw.err != nil {
		return sum, fmt.Errorf("snapshot save: write %s: %w", part, cw.err)
	}
	if err := f.Sync(); err != nil {
		return sum, fmt.Errorf("snapshot save: fsync %s: %w", part, err)
	}
	if err := f.Close(); err != nil {
		return sum, fmt.Errorf("snapshot save: close %s: %w", part, err)
	}
	if err := os.Rename(part, opts.File); err != nil {
		return sum, fmt.Errorf("snapshot save: %w", err)
	}
	if err := syncDir(filepath.Dir(opts.File)); err != nil {
		return sum, fmt.Errorf("snapshot save: %w", err)
	}
	tr := r.Trailer()
	d := time.Since(start)
	return Summary{File: opts.File, Member: h.Member, ClusterID: fmt.Sprintf("%x", h.ClusterID), Applied: h.Applied,
		Items: tr.Items, ValueBytes: tr.ValueBytes, FileBytes: int64(cw.n), Seconds: d.Seconds(),
		MBPerSecond: float64(cw.n) / 1e6 / max(d.Seconds(), 1e-9)}, nil
}

// get requests a member's snapshot stream; a refusal is an error naming
// the member and its reason.
func get(ctx context.Context, client *http.Client, endpoint string) (*http.Response, error) {
	if client == nil {
		client = http.DefaultClient
	}
	url := strings.TrimRight(endpoint, "/") + "/v1/snapshot"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("%s answered %s: %s", endpoint, resp.Status, e.Error)
	}
	return resp, nil
}

// Stream reads a member's snapshot stream (what Save writes to a file)
// and calls each for every item, in key order, as it arrives; nothing is
// held in memory or written. It returns the header and, once the stream
// was whole and its checksum right, the trailer. A record's slices are
// valid only during the call. A stream that ends short or damaged is an
// error after each has seen the records before the damage: a caller
// writing them somewhere must not present that as complete.
func Stream(ctx context.Context, endpoint string, client *http.Client, each func(snapfile.Header, snapfile.Record) error) (snapfile.Header, snapfile.Trailer, error) {
	resp, err := get(ctx, client, endpoint)
	if err != nil {
		return snapfile.Header{}, snapfile.Trailer{}, err
	}
	defer resp.Body.Close()
	r, err := snapfile.NewReader(resp.Body)
	if err != nil {
		return snapfile.Header{}, snapfile.Trailer{}, fmt.Errorf("snapshot from %s: %w", endpoint, err)
	}
	h := r.Header()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return h, r.Trailer(), nil
		}
		if err != nil {
			return h, snapfile.Trailer{}, fmt.Errorf("snapshot from %s: %w", endpoint, err)
		}
		if err := each(h, rec); err != nil {
			return h, snapfile.Trailer{}, err
		}
	}
}

// countingWriter writes to w and counts; it keeps its first error, which
// a full disk makes the real cause of the reader's failure.
type countingWriter struct {
	w   io.Writer
	n   uint64
	err error
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(b)
	c.n += uint64(n)
	if err != nil {
		c.err = err
	}
	return n, err
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

// Status reads the snapshot in path through and checks it.
func Status(path string) (snapfile.Header, snapfile.Trailer, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapfile.Header{}, snapfile.Trailer{}, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return snapfile.Header{}, snapfile.Trailer{}, 0, err
	}
	h, tr, err := snapfile.Verify(f, nil)
	if err != nil {
		return h, tr, st.Size(), fmt.Errorf("%s: %w", path, err)
	}
	return h, tr, st.Size(), nil
}
