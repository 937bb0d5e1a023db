package bench

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvd-project/kvd/internal/testing/syncbuf"
)

// testConfig is a short, count-bounded run of preset against servers.
func testConfig(t *testing.T, preset string, servers ...string) Config {
	t.Helper()
	w, err := Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	w.Keys = min(w.Keys, 500)
	w.Records = min(w.Records, 500)
	return Config{Target: "memcache", Servers: servers, Workload: w, Concurrency: []int{2}, Duration: 2 * time.Second,
		Repeat: 1, Timeout: 2 * time.Second, MaxOps: 2000, LoadTimeout: 5 * time.Second, Seed: 7, Timeline: true}
}

func mustRun(t *testing.T, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep)
	return rep
}

// checkReport asserts that every count in rep adds up: per run, per case
// summary, totals, timelines and latency histograms.
func checkReport(t *testing.T, rep *Report) {
	t.Helper()
	var total Counts
	for _, c := range rep.Cases {
		var sum Counts
		for _, r := range c.Runs {
			what := rep.Workload.Name + " " + c.Phase + " c=" + itoa(c.Concurrency)
			checkCounts(t, what, &r.Counts)
			if answered := uint64(r.Hits + r.Misses + r.Sets); r.Latency.Count != answered {
				t.Errorf("%s: %d latencies recorded for %d answered ops", what, r.Latency.Count, answered)
			}
			if rep.Settings.Timeline {
				var ops, errs, writes int64
				for _, p := range r.Timeline {
					ops, errs, writes = ops+p.Ops, errs+p.Errors, writes+p.Writes
				}
				if ops != r.Ops || errs != r.Errors || writes != r.Sets {
					t.Errorf("%s: timeline sums ops/errors/writes %d/%d/%d, counts %d/%d/%d", what, ops, errs, writes, r.Ops, r.Errors, r.Sets)
				}
			}
			sum.add(&r.Counts)
		}
		checkCounts(t, "summary", &c.Summary.Counts)
		if sum.Ops != c.Summary.Counts.Ops || sum.Errors != c.Summary.Counts.Errors {
			t.Errorf("summary ops/errors %d/%d, runs add to %d/%d", c.Summary.Counts.Ops, c.Summary.Counts.Errors, sum.Ops, sum.Errors)
		}
		total.add(&c.Summary.Counts)
	}
	checkCounts(t, "totals", &rep.Totals)
	if total.Ops != rep.Totals.Ops {
		t.Errorf("totals ops %d, cases add to %d", rep.Totals.Ops, total.Ops)
	}
	if rep.Preload != nil {
		checkCounts(t, "preload", &rep.Preload.Counts)
	}
	var text, page strings.Builder
	if err := WriteText(&text, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(&page, rep); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return strings.TrimSpace(formatCount(float64(n))) }

func TestRunCountsAddUpAgainstFake(t *testing.T) {
	f := startFakeMC(t, nil)
	for _, preset := range PresetNames {
		t.Run(preset, func(t *testing.T) {
			cfg := testConfig(t, preset, f.addr())
			cfg.Verify = true
			cfg.Concurrency = []int{1, 3}
			rep := mustRun(t, cfg)
			if rep.Totals.Errors != 0 || rep.Totals.Wrong != 0 || rep.Totals.UnexpectedMisses != 0 {
				t.Fatalf("errors %v wrong %d missing %d", rep.Totals.ErrorsByKind, rep.Totals.Wrong, rep.Totals.UnexpectedMisses)
			}
			if len(rep.Cases) == 0 || rep.Totals.Ops == 0 {
				t.Fatal("nothing ran")
			}
		})
	}
}

func TestPipelinedRun(t *testing.T) {
	f := startFakeMC(t, nil)
	cfg := testConfig(t, "custom", f.addr())
	cfg.Workload.Pipeline = 16
	cfg.Workload.MissRatio = 0.2
	cfg.Verify = true
	rep := mustRun(t, cfg)
	c := rep.Totals
	if c.Errors != 0 || c.Wrong != 0 || c.UnexpectedMisses != 0 || c.ExpectedMisses == 0 || c.Hits == 0 || c.Sets == 0 {
		t.Fatalf("%+v", c)
	}
}

func TestServerErrorLinesAreCounted(t *testing.T) {
	f := startFakeMC(t, func(f *fakeMC) { f.setReply = "SERVER_ERROR out of memory storing object" })
	cfg := testConfig(t, "custom", f.addr())
	cfg.Workload.Preload = false
	cfg.Workload.Pipeline = 4
	rep := mustRun(t, cfg)
	c := rep.Totals
	if c.Sets != 0 || c.SetErrors != c.SetTries || c.ErrorsByKind[ErrServer] != c.SetTries || c.SetTries == 0 {
		t.Fatalf("%+v", c)
	}
	if !strings.Contains(c.ErrorSamples[ErrServer], "out of memory") {
		t.Fatalf("sample %q", c.ErrorSamples[ErrServer])
	}
	if c.Misses == 0 {
		t.Fatal("gets stopped after server errors")
	}
}

func TestClientErrorAbortsThePipeline(t *testing.T) {
	f := startFakeMC(t, func(f *fakeMC) { f.setReply = "CLIENT_ERROR bad data chunk" })
	cfg := testConfig(t, "keyspace-write", f.addr())
	cfg.Workload.Pipeline = 4
	rep := mustRun(t, cfg)
	c := rep.Totals
	if c.ErrorsByKind[ErrClient] == 0 || c.ErrorsByKind[ErrAborted] != 3*c.ErrorsByKind[ErrClient] || c.Sets != 0 {
		t.Fatalf("%+v", c.ErrorsByKind)
	}
}

func TestDroppedConnectionsAreCountedAndRecovered(t *testing.T) {
	f := startFakeMC(t, func(f *fakeMC) { f.closeEvery = 25 })
	cfg := testConfig(t, "custom", f.addr())
	cfg.Workload.Preload = false
	cfg.Duration = 30 * time.Second // MaxOps ends the run, even on a loaded machine
	rep := mustRun(t, cfg)
	c := rep.Totals
	if c.ErrorsByKind[ErrConnClosed] == 0 || c.Sets == 0 || c.Ops != cfg.MaxOps {
		t.Fatalf("ops %d sets %d errors %v", c.Ops, c.Sets, c.ErrorsByKind)
	}
}

func TestWrongValuesAreCounted(t *testing.T) {
	f := startFakeMC(t, func(f *fakeMC) { f.corrupt = true })
	cfg := testConfig(t, "keyspace-read", f.addr())
	cfg.Verify = true
	rep := mustRun(t, cfg)
	if c := rep.Totals; c.Wrong == 0 || c.Wrong != c.Verified || c.Verified != c.Hits {
		t.Fatalf("wrong %d verified %d hits %d", c.Wrong, c.Verified, c.Hits)
	}
}

func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestUnreachableServerEndsCleanly(t *testing.T) {
	rep := mustRun(t, testConfig(t, "membrain", closedAddr(t)))
	if rep.ProbeErrors != 1 || len(rep.Cases) != 0 || len(rep.Notes) == 0 {
		t.Fatalf("probe errors %d cases %d notes %v", rep.ProbeErrors, len(rep.Cases), rep.Notes)
	}
	if !strings.Contains(rep.Probe[0].Error, ErrConnectRefused) {
		t.Fatalf("probe error %q", rep.Probe[0].Error)
	}
}

// A server that is not a memcached (an HTTP port given by mistake) fails
// the probe like an unreachable one, instead of failing every operation.
func TestNonMemcachedServerFailsTheProbe(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	rep := mustRun(t, testConfig(t, "membrain", srv.Listener.Addr().String()))
	if rep.ProbeErrors != 1 || len(rep.Cases) != 0 || len(rep.Notes) == 0 {
		t.Fatalf("probe errors %d cases %d notes %v", rep.ProbeErrors, len(rep.Cases), rep.Notes)
	}
	if !strings.Contains(rep.Probe[0].Error, "does not speak the memcached protocol") {
		t.Fatalf("probe error %q", rep.Probe[0].Error)
	}
}

func TestDeadServerInTheListIsCountedAndAvoided(t *testing.T) {
	f := startFakeMC(t, nil)
	cfg := testConfig(t, "custom", closedAddr(t), f.addr())
	cfg.Workload.Preload = false
	cfg.Duration = 30 * time.Second // MaxOps ends the run, even on a loaded machine
	rep := mustRun(t, cfg)
	c := rep.Totals
	if rep.ProbeErrors != 1 || c.ErrorsByKind[ErrConnectRefused] == 0 || c.Sets == 0 || c.Ops != cfg.MaxOps {
		t.Fatalf("probe errors %d, ops %d sets %d errors %v", rep.ProbeErrors, c.Ops, c.Sets, c.ErrorsByKind)
	}
}

func TestFailoverWindow(t *testing.T) {
	// Sets 301..500 fail, slowly (as during an election): the longest
	// window without an acknowledged write holds them and ends at set 501.
	f := startFakeMC(t, func(f *fakeMC) { f.failSetsFrom, f.failSetsTo, f.failDelay = 300, 500, 2*time.Millisecond })
	cfg := testConfig(t, "custom", f.addr())
	cfg.Workload.Preload = false
	cfg.Workload.GetRatio, cfg.Workload.SetRatio = 0, 1
	cfg.Failover = true
	rep := mustRun(t, cfg)
	fo := rep.Cases[0].Runs[0].Failover
	if fo == nil || !fo.Recovered || fo.FirstErrorS < fo.GapStartS || fo.LongestGapMs <= 0 || fo.RecoveryMs <= 0 {
		t.Fatalf("failover %+v", fo)
	}
	if n := rep.Totals.ErrorsByKind[ErrServer]; n != 200 {
		t.Fatalf("%d server errors, want 200", n)
	}
}

func TestRepeatAndInterrupt(t *testing.T) {
	f := startFakeMC(t, nil)
	cfg := testConfig(t, "keyspace-bulk", f.addr())
	cfg.Repeat = 3
	cfg.Concurrency = []int{1, 2}
	rep := mustRun(t, cfg)
	if len(rep.Cases) != 2 || len(rep.Cases[0].Runs) != 3 || rep.Cases[1].Summary.OpsPerSec.N != 3 {
		t.Fatalf("cases %d", len(rep.Cases))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := Run(ctx, cfg)
	if err != nil || !rep.Interrupted {
		t.Fatalf("cancelled run: %v interrupted %v", err, rep != nil && rep.Interrupted)
	}
}

func TestRateLimitedRun(t *testing.T) {
	f := startFakeMC(t, nil)
	cfg := testConfig(t, "custom", f.addr())
	cfg.Rate = 2000
	cfg.MaxOps = 200
	rep := mustRun(t, cfg)
	if rep.Totals.Ops != 200 || rep.Totals.Errors != 0 {
		t.Fatalf("%+v", rep.Totals)
	}
}

func TestImportReadsBackWhatTheLoadAttempted(t *testing.T) {
	f := startFakeMC(t, nil)
	cfg := testConfig(t, "import", f.addr())
	cfg.Workload.Records = 500
	cfg.MaxOps = 200 // the load stops after 200 of 500 records
	cfg.Concurrency = []int{3}
	rep := mustRun(t, cfg)
	load, read := rep.Cases[0].Runs[0], rep.Cases[1].Runs[0]
	if load.Complete || load.Ops != 200 || load.Sets != 200 || load.Records != 500 {
		t.Fatalf("load: complete %v ops %d sets %d records %d", load.Complete, load.Ops, load.Sets, load.Records)
	}
	if !read.Complete || read.Records != 200 || read.Hits != 200 || read.Verified != 200 || read.Misses != 0 || read.Wrong != 0 {
		t.Fatalf("read: complete %v records %d hits %d verified %d misses %d wrong %d",
			read.Complete, read.Records, read.Hits, read.Verified, read.Misses, read.Wrong)
	}
}

func TestProgressLine(t *testing.T) {
	f := startFakeMC(t, nil)
	cfg := testConfig(t, "custom", f.addr())
	// Two ticks of the 1 s progress clock: one may race the run's end.
	cfg.Duration, cfg.MaxOps, cfg.Rate = 2500*time.Millisecond, 1e6, 2000
	var buf syncbuf.Buffer
	cfg.Progress = &buf
	mustRun(t, cfg)
	if s := buf.String(); !strings.Contains(s, "ops/s") || !strings.Contains(s, "custom run c=2") || !strings.HasSuffix(s, "\r\x1b[K") {
		t.Fatalf("progress output %q", s)
	}
}
