package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestPresetsAreValid(t *testing.T) {
	for _, name := range PresetNames {
		w, err := Preset(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := w.Validate(true, true); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !strings.HasPrefix(w.Describe(), name+":") {
			t.Errorf("%s: describe %q", name, w.Describe())
		}
	}
	if _, err := Preset("nope"); err == nil || !strings.Contains(err.Error(), "--workload") {
		t.Fatalf("unknown preset: %v", err)
	}
}

func TestWorkloadValidateNamesEveryFlag(t *testing.T) {
	w, _ := Preset("custom")
	w.KeySize = 300
	w.ValueSize = FixedSize(4)
	w.GetRatio, w.SetRatio = 0, 0
	w.MissRatio = 2
	w.Keys = 0
	w.KeyDist = "normal"
	w.Pipeline = 0
	err := w.Validate(true, true)
	if err == nil {
		t.Fatal("no error")
	}
	for _, flag := range []string{"--key-size", "--value-size", "--get-set", "--miss-ratio", "--keys", "--key-dist", "--pipeline"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error does not name %s: %v", flag, err)
		}
	}
	// etcd has no 250-byte key limit; short values are fine without --verify.
	w, _ = Preset("custom")
	w.KeySize, w.ValueSize = 1000, FixedSize(1)
	if err := w.Validate(false, false); err != nil {
		t.Fatal(err)
	}
	// Values no comparison rejects (NaN) and parts whose sum overflows.
	for _, tc := range []struct {
		flag string
		edit func(*Workload)
	}{
		{"--miss-ratio", func(w *Workload) { w.MissRatio = math.NaN() }},
		{"--get-set", func(w *Workload) { w.GetRatio, w.SetRatio = math.MaxInt, 1 }},
		{"--value-size", func(w *Workload) { w.ValueSize = SizeDist{{1, 1, math.MaxInt}, {2, 2, math.MaxInt}} }},
		{"--key-size", func(w *Workload) { w.KeySize = 1 << 40 }},
	} {
		w, _ := Preset("custom")
		tc.edit(&w)
		if err := w.Validate(false, false); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: %v", tc.flag, err)
		}
	}
}

func TestParseSizeDist(t *testing.T) {
	for _, tc := range []struct {
		in        string
		min, max  int
		mean      float64
		wantError bool
	}{
		{in: "512", min: 512, max: 512, mean: 512},
		{in: "64-200", min: 64, max: 200, mean: 132},
		{in: "100:70,1000:25,10000-20000:5", min: 100, max: 20000, mean: 0.70*100 + 0.25*1000 + 0.05*15000},
		{in: "100:70%,1000:30%", min: 100, max: 1000, mean: 370},
		{in: "", wantError: true},
		{in: "abc", wantError: true},
		{in: "200-100", wantError: true},
		{in: "10:0", wantError: true},
		{in: "-5", wantError: true},
		{in: "2000000", wantError: true},
		{in: "1:1000000,2:1000000", min: 1, max: 2, mean: 1.5},
		{in: "1:1000001,2:1", wantError: true},
		{in: "1:9223372036854775807,2:9223372036854775807", wantError: true},
	} {
		d, err := ParseSizeDist(tc.in)
		if tc.wantError {
			if err == nil {
				t.Errorf("%q: no error", tc.in)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if d.Min() != tc.min || d.Max() != tc.max || math.Abs(d.Mean()-tc.mean) > 1e-9 {
			t.Errorf("%q: min %d max %d mean %g, want %d %d %g", tc.in, d.Min(), d.Max(), d.Mean(), tc.min, tc.max, tc.mean)
		}
		if back, err := ParseSizeDist(d.String()); err != nil || back.String() != d.String() {
			t.Errorf("%q: String %q does not parse back (%v)", tc.in, d.String(), err)
		}
	}
}

func TestParseRatioAndConcurrency(t *testing.T) {
	if g, s, err := ParseRatio("9:1"); err != nil || g != 9 || s != 1 {
		t.Fatalf("9:1 → %d %d %v", g, s, err)
	}
	if g, s, err := ParseRatio("1000000:0"); err != nil || g != 1000000 || s != 0 {
		t.Fatalf("1000000:0 → %d %d %v", g, s, err)
	}
	for _, bad := range []string{"9", "a:1", "0:0", "-1:2", "1:x", "1000001:1", "9223372036854775807:1"} {
		if _, _, err := ParseRatio(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	c, err := ParseConcurrency("1, 4,16,4")
	if err != nil || len(c) != 3 || c[0] != 1 || c[1] != 4 || c[2] != 16 {
		t.Fatalf("sweep %v %v", c, err)
	}
	for _, bad := range []string{"", "0", "1,x", "5000", "-2"} {
		if _, err := ParseConcurrency(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestConfigValidateNamesFlags(t *testing.T) {
	w, _ := Preset("keyspace-read")
	cfg := Config{Target: "redis", Servers: []string{"nohostport"}, Workload: w, Concurrency: []int{0},
		Duration: time.Nanosecond, Repeat: 0, Rate: -1, Timeout: 0, MaxOps: 0, LoadTimeout: 0, Failover: true}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, flag := range []string{"--target", "--servers", "--concurrency", "--duration", "--repeat", "--rate", "--timeout", "--max-ops", "--load-timeout", "--failover"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error does not name %s: %v", flag, err)
		}
	}
	w, _ = Preset("custom")
	ok := Config{Target: "memcache", Servers: []string{"127.0.0.1:11211"}, Workload: w, Concurrency: []int{1},
		Duration: time.Second, Repeat: 1, Timeout: time.Second, MaxOps: 1, LoadTimeout: time.Second}
	for _, tc := range []struct {
		rate float64
		ok   bool
	}{
		{0, true}, {1e-3, true}, {5000, true}, {1e9, true},
		{-1, false}, {1e-9, false}, {2e9, false}, {math.NaN(), false}, {math.Inf(1), false},
	} {
		cfg := ok
		cfg.Rate = tc.rate
		if err := cfg.Validate(); (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "--rate") {
			t.Errorf("--rate %g: %v", tc.rate, err)
		}
	}
}
