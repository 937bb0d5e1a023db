package bench

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Run executes every case of cfg and returns the report. Server failures
// (unreachable servers, dropped connections, error replies) are counted in
// the report, never returned; the error is for an invalid cfg only (which
// includes credentials a server refuses).
// Cancelling ctx stops the run early; the report then says Interrupted.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	drv, err := NewDriver(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkCredentials(ctx, drv, cfg); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, drv: drv, w: cfg.Workload}
	if r.cfg.Seed == 0 {
		r.cfg.Seed = rand.Uint64() | 1
	}
	r.runID = strconv.FormatUint(36*36*36+r.cfg.Seed%(36*36*36*35), 36) // always 4 base-36 digits
	r.body = newBodySource(rand.New(rand.NewPCG(r.cfg.Seed, 7)), max(r.w.ValueSize.Max(), 1))
	return r.run(ctx), nil
}

type runner struct {
	cfg   Config
	drv   Driver
	w     Workload
	runID string
	body  *bodySource // shared read-only block of value bodies
	cases int         // case counter, for per-case key scopes
}

func (r *runner) run(ctx context.Context) *Report {
	rep := &Report{
		Tool:     "kvd bench",
		Version:  r.cfg.Version,
		Started:  time.Now(),
		RunID:    r.runID,
		Target:   r.drv.Name(),
		Servers:  r.cfg.Servers,
		Workload: r.w,
		Settings: Settings{
			Concurrency: r.cfg.Concurrency, DurationS: r.cfg.Duration.Seconds(), Repeat: r.cfg.Repeat,
			Rate: r.cfg.Rate, Verify: r.cfg.Verify, Timeline: r.cfg.Timeline, Failover: r.cfg.Failover,
			TimeoutS: r.cfg.Timeout.Seconds(), MaxOps: r.cfg.MaxOps, Seed: r.cfg.Seed,
		},
	}
	defer func() {
		if ctx.Err() != nil {
			rep.Interrupted = true
			rep.Notes = append(rep.Notes, "interrupted: the last case is partial and the rest were not run")
		}
		rep.Finished = time.Now()
	}()

	rep.Probe = r.probe(ctx)
	reachable := 0
	for _, p := range rep.Probe {
		if p.OK {
			reachable++
		} else {
			rep.ProbeErrors++
			rep.Notes = append(rep.Notes, fmt.Sprintf("server %s did not answer: %s", p.Addr, p.Error))
		}
	}
	if reachable == 0 && ctx.Err() == nil {
		rep.Notes = append(rep.Notes, "no server answered; every case was skipped")
	}
	if reachable == 0 {
		return rep
	}

	if r.w.Mode == ModeMixed && r.w.Preload {
		conc := min(max(slices.Max(r.cfg.Concurrency), 4), 16, r.w.Keys)
		depth := 16
		res, _ := r.phase(ctx, phaseSpec{name: "preload", conc: conc, depth: depth, dur: r.cfg.LoadTimeout,
			maxOps: int64(r.w.Keys), records: r.w.Keys, kind: genStripedSet, tag: "p"})
		rep.Preload = &res
		if res.Errors > 0 || !res.Complete {
			rep.Notes = append(rep.Notes, fmt.Sprintf("preload wrote %d of %d keys (%d errors): gets of the rest will miss",
				res.Sets, r.w.Keys, res.Errors))
		}
	}

	for _, conc := range r.cfg.Concurrency {
		phases := []string{"run"}
		if r.w.Mode == ModeImport {
			phases = []string{"load", "read"}
		}
		cases := make([]CaseResult, len(phases))
		for i, ph := range phases {
			cases[i] = CaseResult{Phase: ph, Concurrency: conc}
		}
		for rpt := 1; rpt <= r.cfg.Repeat && ctx.Err() == nil; rpt++ {
			r.cases++
			tag := strconv.FormatInt(int64(r.cases), 36)
			var loaded []int64 // import: records each load worker attempted
			for i, ph := range phases {
				if ctx.Err() != nil {
					break
				}
				spec := phaseSpec{name: ph, conc: conc, depth: r.w.Pipeline, dur: r.cfg.Duration,
					maxOps: r.cfg.MaxOps, tag: tag, repeat: rpt, of: r.cfg.Repeat, rate: r.cfg.Rate}
				switch {
				case r.w.Mode == ModeImport && ph == "load":
					spec.kind, spec.records = genStripedSet, r.w.Records
				case r.w.Mode == ModeImport:
					spec.kind, spec.records, spec.limits = genStripedGet, r.w.Records, loaded
				case r.w.Mode == ModeUniqueWrites:
					spec.kind = genUnique
				case r.w.Mode == ModeBulk:
					spec.kind = genBulk
				default:
					spec.kind = genMixed
				}
				res, attempted := r.phase(ctx, spec)
				if ph == "load" {
					loaded = attempted
				}
				res.Repeat = rpt
				cases[i].Runs = append(cases[i].Runs, res)
			}
		}
		for i := range cases {
			if len(cases[i].Runs) == 0 {
				continue
			}
			cases[i].Summary = summarize(cases[i].Runs)
			rep.Totals.add(&cases[i].Summary.Counts)
			rep.Cases = append(rep.Cases, cases[i])
		}
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() == nil {
		rep.ServersAfter = r.probe(ctx)
	}
	return rep
}

// probe asks every server for its version and stats.
func (r *runner) probe(ctx context.Context) []ServerInfo {
	out := make([]ServerInfo, len(r.cfg.Servers))
	var wg sync.WaitGroup
	for i, addr := range r.cfg.Servers {
		wg.Go(func() {
			info, err := r.drv.Info(ctx, addr, r.cfg.Timeout)
			out[i] = ServerInfo{Addr: addr, OK: err == nil, Info: info}
			if err != nil {
				out[i].Error = err.Error()
			}
		})
	}
	wg.Wait()
	return out
}

// phaseSpec is one timed run of conc workers.
type phaseSpec struct {
	name    string
	kind    genKind
	conc    int
	depth   int
	dur     time.Duration
	maxOps  int64
	records int // finite kinds: how many records
	// limits, when set, caps each worker's share of the records (the
	// import read phase reads back what the load phase attempted).
	limits []int64
	tag    string
	repeat int
	of     int
	rate   float64
}

// phase runs one spec to completion and folds its workers' stats. It also
// returns how many operations each worker attempted.
func (r *runner) phase(ctx context.Context, spec phaseSpec) (RunResult, []int64) {
	workers := make([]*worker, spec.conc)
	for i := range workers {
		var limit int64
		if spec.limits != nil {
			limit = spec.limits[i]
		}
		workers[i] = &worker{
			r:    r,
			spec: &spec,
			id:   i,
			srv:  i % len(r.cfg.Servers),
			gen: newGenerator(&r.w, genParams{kind: spec.kind, runID: r.runID, caseTag: spec.tag,
				worker: i, workers: spec.conc, total: spec.records, limited: spec.limits != nil, limit: limit, seed: r.cfg.Seed ^ uint64(r.cases)<<32, body: r.body}),
			st: newWorkerStats(),
		}
	}
	// Connect first so that connection setup is not measured.
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.conn, _ = r.drv.Dial(ctx, r.cfg.Servers[w.srv], r.cfg.Timeout) })
	}
	wg.Wait()

	var issued atomic.Int64
	start := time.Now()
	end := start.Add(spec.dur)
	for _, w := range workers {
		w.start, w.end, w.issued = start, end, &issued
		w.st.lastWrite, w.st.trackGaps, w.st.keepTimeline = start, r.cfg.Failover, r.cfg.Timeline
		w.st.maxGaps = gapsPerWorker(spec.conc)
		wg.Go(func() { w.loop(ctx) })
	}
	stopProgress := r.progress(&spec, workers, start)
	wg.Wait()
	stopProgress()
	finished := time.Now()
	for _, w := range workers {
		if w.conn != nil {
			_ = w.conn.Close()
		}
	}
	attempted := make([]int64, len(workers))
	for i, w := range workers {
		attempted[i] = w.st.counts.Ops
	}
	return r.fold(&spec, workers, start, finished), attempted
}

// fold merges the workers' stats into one RunResult.
func (r *runner) fold(spec *phaseSpec, workers []*worker, start, finished time.Time) RunResult {
	records := spec.records
	if spec.limits != nil {
		records = 0
		for _, n := range spec.limits {
			records += int(n)
		}
	}
	res := RunResult{get: NewHistogram(), set: NewHistogram(), Records: records}
	var timeline []TimelinePoint
	gaps := make([][]gap, 0, len(workers))
	for _, w := range workers {
		res.Counts.add(&w.st.counts)
		res.get.Merge(w.st.get)
		res.set.Merge(w.st.set)
		for s, b := range w.st.timeline {
			for len(timeline) <= s {
				timeline = append(timeline, TimelinePoint{Second: len(timeline)})
			}
			timeline[s].Ops += b.Ops
			timeline[s].Errors += b.Errors
			timeline[s].Writes += b.Writes
		}
		gaps = append(gaps, w.st.closeGaps(finished)) // one entry per worker, even without gaps
	}
	elapsed := finished.Sub(start)
	res.ElapsedS = elapsed.Seconds()
	for i := range timeline {
		timeline[i].SpanS = min(1, res.ElapsedS-float64(i))
	}
	if elapsed > 0 {
		res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
	}
	all := NewHistogram()
	all.Merge(res.get)
	all.Merge(res.set)
	res.Latency, res.GetLatency, res.SetLatency = Summarize(all), Summarize(res.get), Summarize(res.set)
	if r.cfg.Timeline {
		res.Timeline = timeline
	}
	// A phase that writes nothing (import's read phase) has no failover
	// window: its whole length would read as one that never recovered.
	if r.cfg.Failover && spec.name != "preload" && res.SetTries > 0 {
		var dropped time.Duration
		for _, w := range workers {
			dropped = max(dropped, w.st.droppedMax)
		}
		res.Failover = failoverFrom(start, gaps, dropped)
	}
	res.Complete = res.Ops >= int64(records)
	return res
}

// progress prints a live line every second until the returned func is
// called; a no-op without a progress writer.
func (r *runner) progress(spec *phaseSpec, workers []*worker, start time.Time) func() {
	out := r.cfg.Progress
	if out == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var lastOps int64
		last := start
		for {
			select {
			case <-done:
				fmt.Fprint(out, "\r\x1b[K")
				return
			case now := <-t.C:
				var ops, errs int64
				for _, w := range workers {
					ops += w.st.liveOps.Load()
					errs += w.st.liveErrs.Load()
				}
				rate := float64(ops-lastOps) / now.Sub(last).Seconds()
				lastOps, last = ops, now
				label := fmt.Sprintf("%s %s c=%d", r.w.Name, spec.name, spec.conc)
				if spec.of > 1 {
					label += fmt.Sprintf(" run %d/%d", spec.repeat, spec.of)
				}
				fmt.Fprintf(out, "\r\x1b[K%s  %5.1fs/%v  %s ops/s  %d ops  %d errors",
					label, now.Sub(start).Seconds(), spec.dur, formatCount(rate), ops, errs)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// worker is one simulated client: one connection, one generator.
type worker struct {
	r      *runner
	spec   *phaseSpec
	id     int
	srv    int // index of the server it talks to
	gen    *generator
	conn   Conn
	st     *workerStats
	start  time.Time
	end    time.Time
	issued *atomic.Int64
}

// loop runs batches until the phase ends, the generator is exhausted,
// --max-ops is reached or ctx is cancelled.
func (w *worker) loop(ctx context.Context) {
	cfg := &w.r.cfg
	depth := w.spec.depth
	ops := make([]Op, depth)
	res := make([]Result, depth)
	var interval time.Duration
	if w.spec.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(w.spec.conc) / w.spec.rate)
	}
	next := w.start.Add(time.Duration(w.id) * interval / time.Duration(max(w.spec.conc, 1)))
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil && time.Now().Before(w.end) {
		n := 0
		for n < depth && w.gen.next(&ops[n]) {
			n++
		}
		if n == 0 {
			return // finite stream exhausted
		}
		// Take only what is left of --max-ops: refusing the whole batch
		// would end the case short of it (with none done when the
		// pipeline is deeper than --max-ops).
		if over := w.issued.Add(int64(n)) - w.spec.maxOps; over > 0 {
			if over >= int64(n) {
				return
			}
			n -= int(over)
		}
		sent := time.Now()
		if interval > 0 {
			sched := next
			next = next.Add(time.Duration(n) * interval)
			if !sched.Before(w.end) {
				// That slot belongs to the next case: --rate R over D
				// seconds is R×D operations. Wait out the case so that
				// its ops/s is taken over all of it, not up to the last
				// slot.
				sleepUntil(ctx, w.end)
				return
			}
			if !sleepUntil(ctx, sched) {
				return
			}
			sent = sched // latency from the scheduled start: no coordinated omission
		}
		if w.conn == nil {
			c, err := w.r.drv.Dial(ctx, cfg.Servers[w.srv], cfg.Timeout)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				e, _ := err.(*OpError)
				if e == nil {
					e = &OpError{Kind: ErrConnect, Msg: err.Error()}
				}
				now := time.Now()
				for i := range n {
					w.st.recordError(ops[i].Kind, e, now, w.start)
				}
				w.srv = (w.srv + 1) % len(cfg.Servers)
				sleepUntil(ctx, minTime(time.Now().Add(backoff), w.end))
				backoff = min(backoff*2, time.Second)
				continue
			}
			w.conn = c
			if interval == 0 {
				// Latency runs from writing the batch, not from the
				// reconnect before it (see bench/METHOD.md).
				sent = time.Now()
			}
		}
		err := w.conn.Do(ctx, ops[:n], res[:n])
		if ctx.Err() != nil {
			return // interrupted: this batch's outcome is not counted
		}
		for i := range n {
			w.st.record(&ops[i], &res[i], sent, w.start, cfg.Verify || w.r.w.Mode == ModeImport)
		}
		if err != nil {
			_ = w.conn.Close()
			w.conn = nil
			w.srv = (w.srv + 1) % len(cfg.Servers)
		} else {
			backoff = 10 * time.Millisecond
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sleepUntil waits until t or ctx is done; false if ctx is done.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// workerStats is one worker's private tally; only liveOps and liveErrs are
// read by another goroutine (the progress line).
type workerStats struct {
	counts   Counts
	get, set *Histogram
	timeline []timeBucket
	// keepTimeline fills timeline (--timeline); scratch absorbs the
	// counts otherwise.
	keepTimeline bool
	scratch      timeBucket
	liveOps      atomic.Int64
	liveErrs     atomic.Int64

	// failover: gaps between acknowledged writes longer than minGap, kept
	// only when trackGaps; lastWrite starts at the start of the run. Only
	// the maxGaps longest are kept (a min-heap on length): a client that
	// writes slower than minGap opens a gap with every write, and a long
	// run would hold one per write. droppedMax is the longest let go: a
	// window found no shorter than it is the longest (see failoverFrom).
	trackGaps  bool
	maxGaps    int
	gaps       gapHeap
	droppedMax time.Duration
	lastWrite  time.Time
	firstErr   time.Time
}

type timeBucket struct{ Ops, Errors, Writes int64 }

// minGap is the shortest write gap a worker remembers; shorter ones cannot
// matter for a failover window and would only cost memory.
const minGap = time.Millisecond

// A case keeps at most gapBudget write gaps over all its workers (80 bytes
// each, 21 MB), and each worker at least minGapsKept. A window of length L
// is missed only if some worker had more than its share of gaps at least L
// long, which needs L below the case's length over that share: with 8
// workers, 2.1 ms in a minute's case.
const (
	gapBudget   = 1 << 18
	minGapsKept = 64
)

// gapsPerWorker is each of conc workers' share of gapBudget.
func gapsPerWorker(conc int) int {
	return max(minGapsKept, gapBudget/max(conc, 1))
}

func newWorkerStats() *workerStats {
	return &workerStats{get: NewHistogram(), set: NewHistogram(), maxGaps: minGapsKept}
}

func (s *workerStats) bucket(t, start time.Time) *timeBucket {
	if !s.keepTimeline {
		// Without --timeline nobody reads the buckets: one per second
		// per worker would grow for as long as the run lasts.
		return &s.scratch
	}
	sec := max(int(t.Sub(start)/time.Second), 0)
	for len(s.timeline) <= sec {
		s.timeline = append(s.timeline, timeBucket{})
	}
	return &s.timeline[sec]
}

func (s *workerStats) recordError(kind OpKind, e *OpError, at, start time.Time) {
	s.counts.recordError(kind, e)
	b := s.bucket(at, start)
	b.Ops++
	b.Errors++
	s.liveOps.Add(1)
	s.liveErrs.Add(1)
	if kind == OpSet && s.firstErr.IsZero() {
		s.firstErr = at
	}
}

// record folds one op's outcome into the tally.
func (s *workerStats) record(op *Op, r *Result, sent, start time.Time, verify bool) {
	if r.Err != nil {
		s.recordError(op.Kind, r.Err, r.Done, start)
		return
	}
	c := &s.counts
	c.Ops++
	s.liveOps.Add(1)
	b := s.bucket(r.Done, start)
	b.Ops++
	lat := r.Done.Sub(sent)
	switch op.Kind {
	case OpGet:
		c.Gets++
		s.get.Record(lat)
		if !r.Hit {
			c.Misses++
			if op.ExpectHit {
				c.UnexpectedMisses++
			} else {
				c.ExpectedMisses++
			}
			return
		}
		c.Hits++
		if verify {
			c.Verified++
			if !checkValue(op.Key, r.Value) {
				c.Wrong++
			}
		}
	case OpSet:
		c.SetTries++
		c.Sets++
		s.set.Record(lat)
		b.Writes++
		// etcd's pipelined requests are acknowledged in any order: an
		// earlier acknowledgement recorded later neither opens a gap nor
		// moves the last write back.
		if !r.Done.After(s.lastWrite) {
			break
		}
		if s.trackGaps && r.Done.Sub(s.lastWrite) > minGap {
			s.keepGap(gap{from: s.lastWrite, to: r.Done, firstErr: s.firstErr})
		}
		s.lastWrite = r.Done
		s.firstErr = time.Time{}
	}
}

// keepGap keeps g if it is among the maxGaps longest so far.
func (s *workerStats) keepGap(g gap) {
	if len(s.gaps) < max(s.maxGaps, 1) {
		heap.Push(&s.gaps, g)
		return
	}
	if shortest := s.gaps[0]; g.length() > shortest.length() {
		s.droppedMax = max(s.droppedMax, shortest.length())
		s.gaps[0] = g
		heap.Fix(&s.gaps, 0)
		return
	}
	s.droppedMax = max(s.droppedMax, g.length())
}

// closeGaps ends the open gap at the end of the run and returns the gaps
// kept, in time order; the open one is always among them.
func (s *workerStats) closeGaps(end time.Time) []gap {
	if !s.trackGaps {
		return nil
	}
	gaps := slices.Clone([]gap(s.gaps))
	if end.Sub(s.lastWrite) > minGap {
		gaps = append(gaps, gap{from: s.lastWrite, to: end, firstErr: s.firstErr, open: true})
	}
	slices.SortFunc(gaps, func(a, b gap) int { return a.from.Compare(b.from) })
	return gaps
}

// gapHeap is a min-heap of gaps on their length.
type gapHeap []gap

func (h gapHeap) Len() int           { return len(h) }
func (h gapHeap) Less(i, j int) bool { return h[i].length() < h[j].length() }
func (h gapHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *gapHeap) Push(x any)        { *h = append(*h, x.(gap)) }
func (h *gapHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	*h = old[:len(old)-1]
	return g
}
