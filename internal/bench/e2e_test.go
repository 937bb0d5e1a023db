package bench

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The end-to-end tests run every preset for about a second against real
// servers and check that the report's counts add up. E2EPresets takes the
// addresses, so the same checks run against memcached (here), a kvd cluster
// (its tests call E2EPresets), or anything named in the environment:
//
//	KVD_BENCH_E2E_SERVERS=127.0.0.1:11211[,…] [KVD_BENCH_E2E_TARGET=etcd] go test -run TestE2EExternal ./internal/bench/

const memcachedBin = "/usr/bin/memcached"

func TestE2EMemcached(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	// A fresh memcached per preset: memcached assigns its memory to slab
	// classes as they fill, so after keyspace-write's 8 KiB items a shared
	// one would refuse membrain's 800-byte items (SERVER_ERROR out of
	// memory) — worth knowing, but not what this test checks.
	for _, name := range PresetNames {
		t.Run(name, func(t *testing.T) {
			E2EPreset(t, "memcache", []string{startMemcached(t)}, name)
		})
	}
}

func TestE2EExternal(t *testing.T) {
	servers := os.Getenv("KVD_BENCH_E2E_SERVERS")
	if servers == "" {
		t.Skip("set KVD_BENCH_E2E_SERVERS=host:port,… to run the presets against running servers")
	}
	target := os.Getenv("KVD_BENCH_E2E_TARGET")
	if target == "" {
		target = "memcache"
	}
	E2EPresets(t, target, strings.Split(servers, ","))
}

// startMemcached runs memcached on an ephemeral loopback port for the test
// and returns its address; the test is skipped when memcached is missing.
func startMemcached(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(memcachedBin); err != nil {
		t.Skipf("%s not installed (apt-get install memcached): skipping the end-to-end run", memcachedBin)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	args := []string{"-l", "127.0.0.1", "-p", port, "-U", "0", "-m", "256", "-t", "2"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	cmd := exec.Command(memcachedBin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start memcached: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + port
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("memcached did not listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}

// E2EPresets runs E2EPreset for every preset against the same servers.
func E2EPresets(t *testing.T, target string, servers []string) {
	for _, name := range PresetNames {
		t.Run(name, func(t *testing.T) { E2EPreset(t, target, servers, name) })
	}
}

// E2EPreset runs preset name for about a second (two cases of half a
// second) against servers and checks the counts of the report, that no
// operation failed and that no value was wrong or missing.
func E2EPreset(t *testing.T, target string, servers []string, name string) {
	t.Helper()
	w, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	w.Keys = min(w.Keys, 2000)
	w.Records = min(w.Records, 1000)
	cfg := Config{Target: target, Servers: servers, Workload: w, Concurrency: []int{1, 2},
		Duration: 500 * time.Millisecond, Repeat: 1, Timeout: 5 * time.Second, MaxOps: 10_000_000,
		LoadTimeout: 30 * time.Second, Verify: true, Timeline: true, Failover: !(w.Mode == ModeMixed && w.SetRatio == 0)}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep)
	if rep.ProbeErrors != 0 || len(rep.Cases) == 0 {
		t.Fatalf("probe errors %d, %d cases, notes %v", rep.ProbeErrors, len(rep.Cases), rep.Notes)
	}
	tot := rep.Totals
	if tot.Errors != 0 || tot.Wrong != 0 {
		t.Errorf("errors %v (%v), wrong values %d", tot.ErrorsByKind, tot.ErrorSamples, tot.Wrong)
	}
	if tot.Ops == 0 {
		t.Fatal("no operations")
	}
	for _, c := range rep.Cases {
		for _, r := range c.Runs {
			checkPresetShape(t, &w, c, &r, rep)
		}
	}
}

// checkPresetShape checks what each preset promises of its op stream.
func checkPresetShape(t *testing.T, w *Workload, c CaseResult, r *RunResult, rep *Report) {
	t.Helper()
	what := c.Phase + " c=" + strconv.Itoa(c.Concurrency)
	switch w.Name {
	case "keyspace-write":
		if r.Gets != 0 || r.SetTries != r.Ops {
			t.Errorf("%s: gets %d, set attempts %d of %d ops", what, r.Gets, r.SetTries, r.Ops)
		}
	case "keyspace-read":
		if r.SetTries != 0 || r.Misses != 0 || r.Verified != r.Hits {
			t.Errorf("%s: sets %d misses %d verified %d of %d hits", what, r.SetTries, r.Misses, r.Verified, r.Hits)
		}
	case "keyspace-bulk":
		// Each client writes 10 keys, then reads them 100 times.
		if conc := int64(c.Concurrency); r.Gets > 10*r.SetTries || r.Gets < 10*(r.SetTries-10*conc) {
			t.Errorf("%s: %d gets for %d sets, want 10 per set", what, r.Gets, r.SetTries)
		}
		if r.UnexpectedMisses != 0 {
			t.Errorf("%s: %d keys read back missing", what, r.UnexpectedMisses)
		}
	case "membrain", "custom":
		if rep.Preload == nil || rep.Preload.Sets != int64(w.Keys) {
			t.Fatalf("preload %+v", rep.Preload)
		}
		if r.UnexpectedMisses != 0 {
			t.Errorf("%s: %d preloaded keys missing", what, r.UnexpectedMisses)
		}
		if answered := r.Hits + r.Misses; w.MissRatio > 0 && answered >= 2000 {
			if mr := r.MissRatio(); mr < w.MissRatio/2 || mr > w.MissRatio*2 {
				t.Errorf("%s: miss ratio %.3f, want about %.3f", what, mr, w.MissRatio)
			}
		}
		if r.Ops >= 2000 {
			want := float64(w.GetRatio) / float64(w.GetRatio+w.SetRatio)
			if got := float64(r.Gets) / float64(r.Ops); got < want-0.06 || got > want+0.06 {
				t.Errorf("%s: get share %.3f, want %.3f", what, got, want)
			}
		}
	case "import":
		if c.Phase == "load" && r.Complete && r.Sets != int64(w.Records) {
			t.Errorf("load: %d of %d records stored", r.Sets, w.Records)
		}
		if c.Phase == "read" && r.Complete {
			// The read phase reads back exactly what the load attempted.
			var load *RunResult
			for _, lc := range rep.Cases {
				if lc.Phase == "load" && lc.Concurrency == c.Concurrency {
					load = &lc.Runs[r.Repeat-1]
				}
			}
			if load == nil || r.Ops != load.Ops || r.Hits != load.Sets || r.Verified != r.Hits {
				t.Errorf("read: %d ops, %d hits, %d verified; load attempted %d, stored %d", r.Ops, r.Hits, r.Verified, load.Ops, load.Sets)
			}
		}
	}
}
