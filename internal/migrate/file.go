package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// FileSource reads an export file (ExportWriter's format): `kvd import
// --from-file`. Its listing carries the values, so its Fetcher only hands
// them back.
type FileSource struct {
	Path string
}

// Name implements Source.
func (s *FileSource) Name() string { return "source file " + s.Path }

// List implements Source. A damaged or cut file is an error once reached;
// the items before it have been listed (and so copied), which the
// summary says.
func (s *FileSource) List(ctx context.Context, emit func(Entry) error) error {
	f, err := os.Open(s.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	defer f.Close()
	r, err := NewExportReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		it := &Item{Key: rec.Key, Value: rec.Value, Flags: rec.Flags}
		if rec.Exptime != 0 {
			it.Expires = time.Unix(rec.Exptime, 0)
		}
		if err := emit(Entry{Key: rec.Key, Exp: rec.Exptime, Size: len(rec.Key) + len(rec.Value), Item: it}); err != nil {
			return err
		}
	}
}

// Open implements Source.
func (s *FileSource) Open(context.Context) (Fetcher, error) { return listedFetcher{}, nil }

// listedFetcher returns the items the listing carried.
type listedFetcher struct{}

func (listedFetcher) Fetch(_ context.Context, batch []Entry) ([]Fetched, error) {
	out := make([]Fetched, len(batch))
	for i, e := range batch {
		out[i].Item = e.Item
	}
	return out, nil
}

func (listedFetcher) Close() error { return nil }
