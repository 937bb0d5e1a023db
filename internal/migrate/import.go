package migrate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures Import.
type Options struct {
	// Source is where the items come from.
	Source Source
	// To is kvd's memcache address (host:port).
	To string
	// Dial opens the connections to kvd (default: TCP).
	Dial Dialer
	// Workers is how many batches are in flight at once, each on its own
	// source and kvd connections (default 4).
	Workers int
	// BatchItems and BatchBytes bound one pipelined batch: at most this
	// many items, and a batch is closed once the source's sizes reach
	// BatchBytes (defaults 100 and 1 MiB). In flight at once: about
	// Workers × BatchBytes of values, plus one item.
	BatchItems, BatchBytes int
	// Timeout bounds each round trip to kvd (default 30 s); a source has
	// its own.
	Timeout time.Duration
	// Verify reads every copied item back from kvd once all are copied
	// and compares its value and flags with what was written.
	Verify bool
	// Progress, if set, is called every ProgressEvery (default 2 s) from a
	// goroutine of Import's, and once at the end of each phase.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Logger gets the import's milestones (default: discard).
	Logger *slog.Logger
}

// Progress is how far an import has come.
type Progress struct {
	// Phase is "copy" or "verify".
	Phase                                    string
	Listed, Copied, Expired, Missing, Failed uint64
	Bytes                                    uint64
	Verified                                 uint64
	Elapsed                                  time.Duration
}

// maxListed is how many failures and mismatches a summary names.
const maxListed = 10

// Summary is what an import did; `--json` prints it. Once the copy
// finished, Listed = Copied + Expired + Missing + Failed.
type Summary struct {
	Source string `json:"source"`
	Target string `json:"target"`
	// Complete is false when the import stopped early (see Error): the
	// counts are then what was done before it stopped.
	Complete bool   `json:"complete"`
	Error    string `json:"error,omitempty"`
	Listed   uint64 `json:"listed"`
	Copied   uint64 `json:"copied"`
	// Expired items were listed but their TTL ran out before they could
	// be written (or they had less than a second left); Missing ones were
	// gone from the source before they were read (deleted or evicted).
	Expired uint64 `json:"expired_meanwhile"`
	Missing uint64 `json:"missing_meanwhile"`
	Failed  uint64 `json:"failed"`
	// Failures names the first failed keys and why.
	Failures       []string `json:"failures,omitempty"`
	Bytes          uint64   `json:"bytes"`
	Seconds        float64  `json:"duration_seconds"`
	ItemsPerSecond float64  `json:"items_per_second"`
	MBPerSecond    float64  `json:"mb_per_second"`
	// The verify pass: items read back and compared, those that differed
	// or were absent (the first named), and those whose TTL ran out
	// between the copy and the check.
	Verified            bool     `json:"verified"`
	VerifyChecked       uint64   `json:"verify_checked"`
	Mismatches          uint64   `json:"verify_mismatches"`
	MismatchKeys        []string `json:"verify_mismatch_keys,omitempty"`
	ExpiredBeforeVerify uint64   `json:"verify_expired"`
	VerifySeconds       float64  `json:"verify_seconds"`
}

// Err is the summary's verdict for an exit code: nil only when nothing
// failed and nothing mismatched.
func (s Summary) Err() error {
	if s.Failed > 0 || s.Mismatches > 0 {
		return fmt.Errorf("import into %s: %d items failed, %d mismatched in the verify pass", s.Target, s.Failed, s.Mismatches)
	}
	return nil
}

// copiedItem is what the verify pass compares: the digest of the flags
// and value written, not the value, so an import holds no values once
// they are written.
type copiedItem struct {
	key     []byte
	digest  [16]byte
	expires int64 // when kvd expires it, Unix seconds; 0 never
}

func digest(flags uint32, value []byte) [16]byte {
	h := sha256.New()
	var f [4]byte
	binary.BigEndian.PutUint32(f[:], flags)
	h.Write(f[:])
	h.Write(value)
	var d [16]byte
	copy(d[:], h.Sum(nil))
	return d
}

// importer is one Import's shared state.
type importer struct {
	opts                                     Options
	listed, copied, expired, missing, failed atomic.Uint64
	bytes, checked                           atomic.Uint64
	mu                                       sync.Mutex
	failures, mismatches                     []string
	nMismatch, nExpiredVerify                uint64
}

func (im *importer) fail(key []byte, why string) {
	im.failed.Add(1)
	im.mu.Lock()
	defer im.mu.Unlock()
	if len(im.failures) < maxListed {
		im.failures = append(im.failures, fmt.Sprintf("%q: %s", truncate(key), why))
	}
}

// Import copies opts.Source's items into the kvd at opts.To through its
// memcache protocol, then (with Verify) reads them back. The returned
// summary holds what was done even when an error stopped the import (the
// source or kvd failing, ctx ending); per-item failures are counted, not
// returned: Summary.Err judges them.
func Import(ctx context.Context, opts Options) (Summary, error) {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.BatchItems <= 0 {
		opts.BatchItems = 100
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 1 << 20
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Dial == nil {
		opts.Dial = defaultDial
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	im := &importer{opts: opts}
	start := time.Now()
	sum := Summary{Source: opts.Source.Name(), Target: opts.To}
	report := func(phase string) {
		if opts.Progress != nil {
			opts.Progress(im.progress(phase, time.Since(start)))
		}
	}
	stopProgress := im.every(opts.ProgressEvery, func() { report("copy") })
	copied, err := im.copyAll(ctx)
	stopProgress()
	report("copy")
	copyTime := time.Since(start)
	im.fill(&sum, copyTime)
	if err != nil {
		sum.Error = err.Error()
		return sum, fmt.Errorf("import from %s into kvd %s stopped after %d items copied: %w", opts.Source.Name(), opts.To, sum.Copied, err)
	}
	opts.Logger.Info("import copied", "source", sum.Source, "to", opts.To, "copied", sum.Copied, "seconds", copyTime.Seconds())
	if opts.Verify {
		vstart := time.Now()
		stopProgress = im.every(opts.ProgressEvery, func() { report("verify") })
		err = im.verifyAll(ctx, copied)
		stopProgress()
		report("verify")
		sum.VerifySeconds = time.Since(vstart).Seconds()
		sum.Verified = err == nil
		sum.VerifyChecked = im.checked.Load()
		sum.Mismatches, sum.MismatchKeys, sum.ExpiredBeforeVerify = im.nMismatch, im.mismatches, im.nExpiredVerify
		if err != nil {
			sum.Error = err.Error()
			return sum, fmt.Errorf("import: verify pass against kvd %s: %w", opts.To, err)
		}
	}
	sum.Complete = true
	return sum, nil
}

func (im *importer) fill(sum *Summary, d time.Duration) {
	sum.Listed, sum.Copied, sum.Expired = im.listed.Load(), im.copied.Load(), im.expired.Load()
	sum.Missing, sum.Failed, sum.Bytes = im.missing.Load(), im.failed.Load(), im.bytes.Load()
	im.mu.Lock()
	sum.Failures = append([]string(nil), im.failures...)
	im.mu.Unlock()
	sum.Seconds = d.Seconds()
	sum.ItemsPerSecond = float64(sum.Copied) / max(d.Seconds(), 1e-9)
	sum.MBPerSecond = float64(sum.Bytes) / 1e6 / max(d.Seconds(), 1e-9)
}

func (im *importer) progress(phase string, d time.Duration) Progress {
	return Progress{Phase: phase, Listed: im.listed.Load(), Copied: im.copied.Load(), Expired: im.expired.Load(),
		Missing: im.missing.Load(), Failed: im.failed.Load(), Bytes: im.bytes.Load(), Verified: im.checked.Load(), Elapsed: d}
}

// every calls f every d until the returned stop is called; stop returns
// once f is no longer running.
func (im *importer) every(d time.Duration, f func()) (stop func()) {
	if im.opts.Progress == nil {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(done); <-exited }
}

// firstError keeps the first error of a group of goroutines and cancels
// the others, whose errors are then only the consequence.
type firstError struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.once.Do(func() { f.err = err; f.cancel() })
}

// copyAll runs the listing and the workers; it returns what was copied.
// listPasses bounds how often a memcached source is listed (see copyAll).
const listPasses = 3

func (im *importer) copyAll(parent context.Context) ([]copiedItem, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	fe := &firstError{cancel: cancel}
	batches := make(chan []Entry, im.opts.Workers)
	go func() {
		defer close(batches)
		var batch []Entry
		size := 0
		send := func() error {
			select {
			case batches <- batch:
				batch, size = nil, 0
				return nil
			case <-ctx.Done():
				return errStopped
			}
		}
		// memcached's LRU crawler does not promise to visit every item:
		// one its LRU maintainer moves between segments while the crawl
		// passes can be missed (a 100k-item import missed one in CI). So
		// a memcached is listed again, copying only keys no earlier pass
		// listed, until a pass finds none new (also catching items written
		// during the import), at most listPasses times.
		passes := 1
		var seen map[string]struct{}
		if _, ok := im.opts.Source.(*MemcachedSource); ok {
			passes, seen = listPasses, make(map[string]struct{})
		}
		var err error
		for pass := 1; pass <= passes && err == nil; pass++ {
			fresh := 0
			err = im.opts.Source.List(ctx, func(e Entry) error {
				if seen != nil {
					if _, dup := seen[string(e.Key)]; dup {
						return nil
					}
					seen[string(e.Key)] = struct{}{}
				}
				fresh++
				im.listed.Add(1)
				batch = append(batch, e)
				size += e.Size
				if len(batch) >= im.opts.BatchItems || size >= im.opts.BatchBytes {
					return send()
				}
				return nil
			})
			if err == nil && len(batch) > 0 {
				err = send()
			}
			if pass > 1 && fresh > 0 {
				im.opts.Logger.Info("a later listing pass found keys the earlier ones missed", "pass", pass, "keys", fresh)
			}
			if fresh == 0 {
				break
			}
		}
		if err != nil && !errors.Is(err, errStopped) {
			fe.set(err)
		}
	}()
	results := make([][]copiedItem, im.opts.Workers)
	var wg sync.WaitGroup
	for w := range im.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			results[w], err = im.copyWorker(ctx, parent, batches)
			if err != nil {
				fe.set(err)
			}
		}()
	}
	wg.Wait()
	// The lister stops once nobody takes its batches (ctx is cancelled on
	// the first error); drain so it cannot block on a full channel.
	for range batches {
	}
	if fe.err == nil && ctx.Err() != nil {
		fe.err = ctx.Err()
	}
	if fe.err != nil {
		return nil, fe.err
	}
	var n int
	for _, r := range results {
		n += len(r)
	}
	all := make([]copiedItem, 0, n)
	for _, r := range results {
		all = append(all, r...)
	}
	return all, nil
}

func (im *importer) dialKVD(ctx context.Context) (*metaConn, error) {
	return dialMeta(ctx, im.opts.Dial, im.opts.To, "kvd "+im.opts.To, im.opts.Timeout)
}

// copyWorker copies batches until they run out or something fails. A
// batch written to kvd is seen through to its answers unless parent
// ends, even when another worker's failure cancelled ctx: so the summary
// counts exactly what kvd acknowledged.
func (im *importer) copyWorker(ctx, parent context.Context, batches <-chan []Entry) (copied []copiedItem, err error) {
	f, err := im.opts.Source.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kvd, err := im.dialKVD(ctx)
	if err != nil {
		return nil, err
	}
	defer kvd.Close()
	stop := context.AfterFunc(parent, func() { _ = kvd.c.SetDeadline(time.Now()) })
	defer stop()
	var toWrite []*Item
	for batch := range batches {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		got, err := f.Fetch(ctx, batch)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		toWrite, exps := toWrite[:0], make([]int64, 0, len(batch))
		for i, g := range got {
			switch {
			case g.Err != "":
				im.fail(batch[i].Key, "source answered "+g.Err)
			case g.Item == nil:
				if batch[i].Exp != 0 && batch[i].Exp <= now.Unix() {
					im.expired.Add(1)
				} else {
					im.missing.Add(1)
				}
			default:
				exptime, live := exptimeFor(g.Item.Expires, now)
				if !live {
					im.expired.Add(1)
					continue
				}
				kvd.writeSet(g.Item.Key, g.Item.Value, g.Item.Flags, exptime)
				toWrite, exps = append(toWrite, g.Item), append(exps, exptime)
			}
		}
		if len(toWrite) == 0 {
			continue
		}
		if err := kvd.flush(); err != nil {
			return nil, err
		}
		for i, it := range toWrite {
			rp, err := kvd.readReply()
			if err != nil {
				return nil, err
			}
			if rp.code != "STORED" && rp.code != "HD" {
				im.fail(it.Key, "kvd answered "+rp.code+rp.errText)
				continue
			}
			im.copied.Add(1)
			im.bytes.Add(uint64(len(it.Value)))
			c := copiedItem{key: bytes.Clone(it.Key), digest: digest(it.Flags, it.Value), expires: exps[i]}
			if c.expires != 0 && c.expires <= thirtyDays {
				c.expires += now.Unix()
			}
			copied = append(copied, c)
		}
	}
	return copied, nil
}

// thirtyDays is memcached's bound on a relative exptime; larger ones are
// absolute Unix times.
const thirtyDays = 30 * 24 * 3600

// exptimeFor is the exptime that gives an item expiring at expires the
// TTL it has left at now: whole seconds, rounded down, relative (absolute
// past 30 days, as memcached reads those). An item with less than a
// second left is not live: written, it would be gone before it could be
// read.
func exptimeFor(expires, now time.Time) (exptime int64, live bool) {
	if expires.IsZero() {
		return 0, true
	}
	left := int64(expires.Sub(now) / time.Second)
	switch {
	case left <= 0:
		return 0, false
	case left > thirtyDays:
		return now.Unix() + left, true
	default:
		return left, true
	}
}

// verifyAll reads every copied item back from kvd, in Workers parallel
// pipelined streams.
func (im *importer) verifyAll(ctx context.Context, copied []copiedItem) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fe := &firstError{cancel: cancel}
	var wg sync.WaitGroup
	per := (len(copied) + im.opts.Workers - 1) / im.opts.Workers
	for w := range im.opts.Workers {
		lo, hi := min(w*per, len(copied)), min((w+1)*per, len(copied))
		if lo == hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := im.verifyWorker(ctx, copied[lo:hi]); err != nil {
				fe.set(err)
			}
		}()
	}
	wg.Wait()
	if fe.err == nil && ctx.Err() != nil {
		fe.err = ctx.Err()
	}
	return fe.err
}

func (im *importer) verifyWorker(ctx context.Context, items []copiedItem) error {
	kvd, err := im.dialKVD(ctx)
	if err != nil {
		return err
	}
	defer kvd.Close()
	stop := context.AfterFunc(ctx, func() { _ = kvd.c.SetDeadline(time.Now()) })
	defer stop()
	for len(items) > 0 {
		n := min(len(items), im.opts.BatchItems)
		batch := items[:n]
		items = items[n:]
		for _, c := range batch {
			kvd.writeGet(c.key, false)
		}
		if err := kvd.flush(); err != nil {
			return err
		}
		for _, c := range batch {
			rp, err := kvd.readReply()
			if err != nil {
				return err
			}
			im.checked.Add(1)
			switch {
			case rp.code == "VA" && digest(rp.flags, rp.value) == c.digest:
			// kvd counts a relative TTL from its own current second, which
			// may be up to a second before the one the TTL was computed in.
			case rp.code == "EN" && c.expires != 0 && c.expires <= time.Now().Unix()+1:
				im.mu.Lock()
				im.nExpiredVerify++
				im.mu.Unlock()
			default:
				why := "a different value or flags"
				switch {
				case rp.code == "EN":
					why = "absent"
				case rp.errText != "":
					why = rp.errText
				}
				im.mu.Lock()
				im.nMismatch++
				if len(im.mismatches) < maxListed {
					im.mismatches = append(im.mismatches, fmt.Sprintf("%q: %s", truncate(c.key), why))
				}
				im.mu.Unlock()
			}
		}
	}
	return nil
}
