package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kvd-project/kvd/internal/bench"
	"github.com/kvd-project/kvd/internal/version"
)

// benchOptions holds every `kvd bench` flag.
type benchOptions struct {
	servers     []string
	target      string
	workload    string
	concurrency string
	duration    time.Duration
	repeat      int
	rate        float64
	verify      bool
	timeline    bool
	failover    bool
	failOnError bool
	jsonPath    string
	htmlPath    string
	timeout     time.Duration
	maxOps      int64
	loadTimeout time.Duration
	seed        uint64
	progress    string

	// Workload shaping: each overrides the preset's value when given.
	keySize   int
	valueSize string
	getSet    string
	missRatio float64
	keys      int
	keyDist   string
	pipeline  int
	records   int
	preload   bool

	// sec are the TLS (--tls, --cacert, --cert, --key) and --user flags.
	sec clientSecurity
}

func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench --servers host:port,... --workload NAME",
		Short: "Load-test memcached-protocol servers (kvd, memcached) or etcd and report throughput and latency",
		Long: `bench drives a workload against kvd, plain memcached or etcd and reports ops/s,
latency percentiles (p50/p90/p99/p99.9/max) and errors by kind for every
concurrency level of the sweep.

Workloads (presets; the shaping flags override their values):
  keyspace-write  unique keys, 8 KiB values, writes only
  keyspace-read   cyclic reads of a preloaded key space of 8 KiB values
  keyspace-bulk   per client 10 keys written once and read 10 times each
  membrain        250-byte keys, 512-byte values, get:set 9:1, 5% of gets miss
  import          --records records written, then all read back and verified
  custom          get:set 1:1 over 10000 keys, 32-byte keys, 100-byte values

Server failures (unreachable servers, dropped connections, error replies)
are counted and reported; the exit status is non-zero for them only with
--fail-on-error.`,
		Example: `  kvd bench --servers 127.0.0.1:11211 --workload membrain --concurrency 1,4,16 --duration 5s --html out.html
  kvd bench --servers 127.0.0.1:11211 --workload custom --get-set 9:1 --value-size 100-1000 --pipeline 8
  KVD_PASSWORD=… kvd bench --servers kvd1:11211 --cacert ca.crt --user bench --workload membrain
  kvd bench --target etcd --servers 127.0.0.1:2379 --workload keyspace-write --concurrency 4
  kvd bench --servers n1:11211,n2:11211,n3:11211 --workload custom --get-set 1:1 --failover --timeline --duration 60s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, o) },
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.servers, "servers", nil, "comma-separated host:port list; clients are spread over all of them (required)")
	f.StringVar(&o.target, "target", "memcache", "protocol of the servers: memcache (kvd, memcached) or etcd")
	f.StringVar(&o.workload, "workload", "membrain", "preset: "+strings.Join(bench.PresetNames, ", "))
	f.StringVar(&o.concurrency, "concurrency", "1,2,4,6,8", "concurrent clients (one connection each); a comma-separated list is a sweep")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "length of each case (for import: the limit of each phase)")
	f.IntVar(&o.repeat, "repeat", 1, "run every case N times and report mean and spread")
	f.Float64Var(&o.rate, "rate", 0, "cap on the total operations per second of a case (0: as fast as possible)")
	f.BoolVar(&o.verify, "verify", false, "check the checksum of every value read; count wrong and missing values")
	f.BoolVar(&o.timeline, "timeline", false, "report operations and errors per second")
	f.BoolVar(&o.failover, "failover", false, "report the longest window without an acknowledged write and the time to recover")
	f.BoolVar(&o.failOnError, "fail-on-error", false, "exit non-zero (3) when any operation failed or a value was wrong or missing")
	f.StringVar(&o.jsonPath, "json", "", "write every number of the report as JSON to this file")
	f.StringVar(&o.htmlPath, "html", "", "write a self-contained HTML page with charts to this file")
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "limit of every connection attempt and every request")
	f.Int64Var(&o.maxOps, "max-ops", 100_000_000, "limit of operations per case")
	f.DurationVar(&o.loadTimeout, "load-timeout", 2*time.Minute, "limit of the preload of the key space")
	f.Uint64Var(&o.seed, "seed", 0, "seed of key and size choices, keys' run prefix included (0: random)")
	f.StringVar(&o.progress, "progress", "auto", "live progress line on stderr: auto (only on a terminal), always or never")

	f.IntVar(&o.keySize, "key-size", 0, "key length in bytes (16..250 for memcached)")
	f.StringVar(&o.valueSize, "value-size", "", `value size in bytes: "512", a uniform range "64-200", or weighted "100:70,1000:25,10000:5"`)
	f.StringVar(&o.getSet, "get-set", "", `get:set ratio, for example "9:1"`)
	f.Float64Var(&o.missRatio, "miss-ratio", 0, "share of gets aimed at keys never written (0..1)")
	f.IntVar(&o.keys, "keys", 0, "size of the key space")
	f.StringVar(&o.keyDist, "key-dist", "", "key choice: seq (cyclic), uniform or zipf")
	f.IntVar(&o.pipeline, "pipeline", 0, "requests each client sends before reading the replies (1..256)")
	f.IntVar(&o.records, "records", 0, "records written and read back by import")
	f.BoolVar(&o.preload, "preload", true, "write the key space before the cases so gets of it hit")
	f.BoolVar(&o.sec.forceTLS, "tls", false, "speak TLS to the memcache servers (implied by --cacert, --cert and --key)")
	o.sec.bind(f)
	return cmd
}

// failedError is returned for --fail-on-error; main exits with its code.
type failedError struct{ msg string }

func (e *failedError) Error() string { return e.msg }
func (e *failedError) ExitCode() int { return 3 }

func runBench(cmd *cobra.Command, o *benchOptions) error {
	cfg, err := o.config(cmd)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Fail on unwritable output files before the run, not after it.
	for _, p := range []struct{ flag, path string }{{"--json", o.jsonPath}, {"--html", o.htmlPath}} {
		if p.path == "" {
			continue
		}
		f, err := os.OpenFile(p.path, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("%s: %w", p.flag, err)
		}
		_ = f.Close()
	}
	rep, err := bench.Run(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if err := bench.WriteText(out, rep); err != nil {
		return err
	}
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
		fmt.Fprintf(out, "wrote %s\n", o.jsonPath)
	}
	if o.htmlPath != "" {
		if err := writeHTMLFile(o.htmlPath, rep); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
		fmt.Fprintf(out, "wrote %s\n", o.htmlPath)
	}
	if rep.Interrupted {
		return errors.New("bench interrupted; the report above is partial")
	}
	if o.failOnError {
		t := rep.Totals
		bad := t.Errors + t.Wrong + rep.ProbeErrors
		if rep.Preload != nil {
			bad += rep.Preload.Errors
		}
		if cfg.Verify || cfg.Workload.Mode == bench.ModeImport {
			bad += t.UnexpectedMisses
		}
		if bad > 0 {
			return &failedError{msg: fmt.Sprintf("%d failed operations or bad values (--fail-on-error)", bad)}
		}
	}
	return nil
}

func writeHTMLFile(path string, rep *bench.Report) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return bench.WriteHTML(f, rep)
}

// config turns the flags into a bench.Config: the preset, then every
// shaping flag that was given, each checked against the workload's shape.
func (o *benchOptions) config(cmd *cobra.Command) (bench.Config, error) {
	if o.target == "memcached" {
		o.target = "memcache"
	}
	cfg := bench.Config{
		Target: o.target, Servers: o.servers, Duration: o.duration, Repeat: o.repeat, Rate: o.rate,
		Verify: o.verify, Timeline: o.timeline, Failover: o.failover, Timeout: o.timeout, MaxOps: o.maxOps,
		LoadTimeout: o.loadTimeout, Seed: o.seed, Version: version.Version,
	}
	var errs []error
	if len(o.servers) == 0 {
		errs = append(errs, errors.New("--servers: required (for example --servers 127.0.0.1:11211)"))
	}
	conc, err := bench.ParseConcurrency(o.concurrency)
	if err != nil {
		errs = append(errs, fmt.Errorf("--concurrency: %w", err))
	}
	cfg.Concurrency = conc
	if cfg.TLS, err = o.sec.tlsConfig(); err != nil {
		errs = append(errs, err)
	}
	if cfg.User, cfg.Password, _, err = o.sec.credentials(); err != nil {
		errs = append(errs, err)
	}
	w, err := bench.Preset(o.workload)
	if err != nil {
		return cfg, errors.Join(append(errs, err)...)
	}
	changed := cmd.Flags().Changed
	// onlyFor checks that the preset uses flag; the error suggests --workload
	// custom, which takes every shaping flag but --records (import only).
	onlyFor := func(flag string, ok bool, what string) bool {
		if changed(flag) && !ok {
			try := "custom"
			if flag == "records" {
				try = "import"
			}
			errs = append(errs, fmt.Errorf("--%s: workload %s does not use it (%s; try --workload %s)", flag, w.Name, what, try))
			return false
		}
		return changed(flag)
	}
	mixed := w.Mode == bench.ModeMixed
	if changed("key-size") {
		w.KeySize = o.keySize
	}
	if changed("value-size") {
		d, err := bench.ParseSizeDist(o.valueSize)
		if err != nil {
			errs = append(errs, fmt.Errorf("--value-size: %w", err))
		} else {
			w.ValueSize = d
		}
	}
	if changed("pipeline") {
		w.Pipeline = o.pipeline
	}
	if onlyFor("get-set", mixed, "its mix is fixed") {
		g, s, err := bench.ParseRatio(o.getSet)
		if err != nil {
			errs = append(errs, fmt.Errorf("--get-set: %w", err))
		} else {
			w.GetRatio, w.SetRatio = g, s
		}
	}
	if onlyFor("miss-ratio", mixed, "it reads only keys it wrote") {
		w.MissRatio = o.missRatio
	}
	if onlyFor("keys", mixed, "its keys are not a fixed key space") {
		w.Keys = o.keys
	}
	if onlyFor("key-dist", mixed, "its keys are not drawn from a key space") {
		w.KeyDist = bench.KeyDist(o.keyDist)
	}
	if onlyFor("preload", mixed, "it has no key space to preload") {
		w.Preload = o.preload
	}
	if onlyFor("records", w.Mode == bench.ModeImport, "only import has records") {
		w.Records = o.records
	}
	switch o.progress {
	case "always":
		cfg.Progress = cmd.ErrOrStderr()
	case "never":
	case "auto":
		if isTerminal(cmd.ErrOrStderr()) {
			cfg.Progress = cmd.ErrOrStderr()
		}
	default:
		errs = append(errs, fmt.Errorf("--progress: %q is not auto, always or never", o.progress))
	}
	cfg.Workload = w
	return cfg, errors.Join(errs...)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
