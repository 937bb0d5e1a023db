package migrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Entry is one key a Source lists.
type Entry struct {
	Key []byte
	// Exp is when the source said the item expires, in Unix seconds; 0:
	// never. An item the source no longer has once its Exp has passed
	// expired; one that is gone earlier was deleted.
	Exp int64
	// Size bounds the item's bytes, to size batches.
	Size int
	// Item is the item itself, for a source that lists values with their
	// keys (a file); its Fetcher hands it back.
	Item *Item
}

// Item is one item to copy.
type Item struct {
	Key, Value []byte
	Flags      uint32
	// Expires is when the item expires; the zero time: never.
	Expires time.Time
}

// Fetched is what a Fetcher found for one entry: the item, nothing (the
// source no longer has it), or an error answer concerning it alone.
type Fetched struct {
	Item *Item
	Err  string
}

// Source is where an import's items come from. List and Open are called
// from different goroutines; each Fetcher serves one worker.
type Source interface {
	// Name names the source in errors and summaries.
	Name() string
	// List calls emit for every key, in the source's order, and returns
	// once all are listed, emit fails, or the source does.
	List(ctx context.Context, emit func(Entry) error) error
	// Open returns a Fetcher for one worker.
	Open(ctx context.Context) (Fetcher, error)
}

// Fetcher fetches batches of listed entries.
type Fetcher interface {
	// Fetch returns one Fetched per entry, in order. An error means the
	// source can no longer be read.
	Fetch(ctx context.Context, batch []Entry) ([]Fetched, error)
	Close() error
}

// MemcachedSource lists a live memcached's keys with `lru_crawler
// metadump all` and fetches values, flags and remaining TTLs with
// pipelined `mg <key> v f t`.
type MemcachedSource struct {
	Addr string
	// Dial opens connections (default: TCP).
	Dial Dialer
	// Timeout bounds each round trip (default 30 s).
	Timeout time.Duration
}

// Name implements Source.
func (s *MemcachedSource) Name() string { return "source memcached " + s.Addr }

func (s *MemcachedSource) dial(ctx context.Context) (*metaConn, error) {
	dial := s.Dial
	if dial == nil {
		dial = defaultDial
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return dialMeta(ctx, dial, s.Addr, s.Name(), timeout)
}

// busyRetries bounds how long List waits for a crawler another client
// runs (memcached runs one at a time and answers BUSY meanwhile).
const busyRetries = 100

// List implements Source. The metadump has a connection of its own:
// memcached refuses it after other commands pipelined on the same one.
func (s *MemcachedSource) List(ctx context.Context, emit func(Entry) error) error {
	c, err := s.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Now()) })
	defer stop()
	for attempt := 0; ; attempt++ {
		c.w.WriteString("lru_crawler metadump all\r\n")
		if err := c.flush(); err != nil {
			return err
		}
		c.begin()
		line, err := c.readLine()
		if err != nil {
			return err
		}
		if strings.HasPrefix(string(line), "BUSY") && attempt < busyRetries {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for {
			if string(line) == "END" {
				return nil
			}
			e, err := ParseDumpLine(line)
			if err != nil {
				return fmt.Errorf("%s: lru_crawler metadump: %w", s.Name(), err)
			}
			exp := e.Exp
			if exp < 0 {
				exp = 0
			}
			if err := emit(Entry{Key: e.Key, Exp: exp, Size: e.Size}); err != nil {
				return err
			}
			// The dump streams as fast as the workers take it; each line
			// gets the full timeout.
			c.begin()
			if line, err = c.readLine(); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("lru_crawler metadump cut short: %w", err)
			}
		}
	}
}

// Open implements Source.
func (s *MemcachedSource) Open(ctx context.Context) (Fetcher, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &memcachedFetcher{c: c}, nil
}

type memcachedFetcher struct{ c *metaConn }

func (f *memcachedFetcher) Close() error { return f.c.Close() }

// Fetch implements Fetcher: one pipelined round trip per batch.
func (f *memcachedFetcher) Fetch(ctx context.Context, batch []Entry) ([]Fetched, error) {
	stop := context.AfterFunc(ctx, func() { _ = f.c.c.SetDeadline(time.Now()) })
	defer stop()
	// memcached's t is whole seconds left, rounded down, as of when it
	// answered; counting from before the request errs on the short side.
	asOf := time.Now()
	for _, e := range batch {
		f.c.writeGet(e.Key, true)
	}
	if err := f.c.flush(); err != nil {
		return nil, err
	}
	out := make([]Fetched, len(batch))
	for i, e := range batch {
		rp, err := f.c.readReply()
		if err != nil {
			return nil, err
		}
		switch {
		case rp.errText != "":
			out[i].Err = rp.errText
		case rp.code == "EN":
		case rp.code == "VA":
			it := &Item{Key: e.Key, Value: rp.value, Flags: rp.flags}
			if !rp.hasTTL {
				return nil, f.c.wrap(fmt.Errorf("%w: mg answered without the t flag", errProtocol))
			}
			if rp.ttl >= 0 {
				it.Expires = asOf.Add(time.Duration(rp.ttl) * time.Second)
			}
			out[i].Item = it
		default:
			return nil, f.c.wrap(fmt.Errorf("%w: %q to mg", errProtocol, rp.code))
		}
	}
	return out, nil
}

// errStopped ends a listing the import no longer wants.
var errStopped = errors.New("import stopped")
