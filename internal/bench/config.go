package bench

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// maxReplyBuffers bounds what one case's in-flight gets may hold in reply
// buffers (connections × pipeline × the largest value): 4096 connections of
// 1 MiB values fit, 4096 × 256 of them (1 TiB) do not.
const maxReplyBuffers = 8 << 30

// Config is one `kvd bench` invocation. Each field mirrors the flag named
// in its comment; Validate names the flag of every problem.
type Config struct {
	// Target is the protocol: "memcache" (kvd, memcached) or "etcd". --target
	Target string
	// Servers are host:port addresses; workers are spread over them
	// round-robin and move to the next one when theirs fails. --servers
	Servers []string
	// Workload is the preset, with any custom flags applied. --workload …
	Workload Workload
	// Concurrency is the sweep: one case per level, each level being that
	// many clients with one connection each. --concurrency
	Concurrency []int
	// Duration is how long each case runs (for import: the upper bound of
	// each phase). --duration
	Duration time.Duration
	// Repeat runs every case this many times; the report gives the mean and
	// spread. --repeat
	Repeat int
	// Rate caps the total operations per second of a case (0: no cap). With
	// a cap, latency is measured from each op's scheduled start. --rate
	Rate float64
	// Verify checks the checksum of every value read. --verify
	Verify bool
	// Timeline keeps per-second ops and errors in the report. --timeline
	Timeline bool
	// Failover computes the longest window without an acknowledged write. --failover
	Failover bool
	// Timeout bounds every dial and every request. --timeout
	Timeout time.Duration
	// MaxOps bounds the operations of one case (each phase of import). --max-ops
	MaxOps int64
	// LoadTimeout bounds the preload of the key space. --load-timeout
	LoadTimeout time.Duration
	// Seed makes key and size choices reproducible, the keys' run prefix
	// included: two runs with one seed against one server write the same
	// keys. --seed
	Seed uint64
	// Progress receives a live progress line (nil: none). The CLI passes
	// the terminal, never a file or pipe.
	Progress io.Writer
	// Version is the tool version recorded in the report.
	Version string
	// TLS, when set, wraps every memcache connection in TLS with this
	// client configuration (its ServerName, when empty, is the server's
	// host). --tls, --cacert, --cert, --key
	TLS *tls.Config
	// User and Password, when User is set, authenticate every memcache
	// connection before its first request (memcached's text-protocol
	// authentication, "set auth"). --user
	User, Password string
}

// The range of --rate other than 0: one operation in 1,000 s at the least
// (4,096 clients then space their requests 47 days apart, within a
// time.Duration), a billion a second at the most.
const (
	minRate = 1e-3
	maxRate = 1e9
)

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Target != "memcache" && c.Target != "etcd" {
		bad("--target: %q is not memcache or etcd", c.Target)
	}
	if len(c.Servers) == 0 {
		bad("--servers: at least one host:port is needed")
	}
	for _, s := range c.Servers {
		if host, port, err := net.SplitHostPort(s); err != nil || host == "" || port == "" {
			bad("--servers: %q is not host:port", s)
		}
	}
	if len(c.Concurrency) == 0 {
		bad("--concurrency: at least one level is needed")
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > 4096 {
			bad("--concurrency: %d is not in [1, 4096]", n)
		}
	}
	if c.Duration < 10*time.Millisecond || c.Duration > 24*time.Hour {
		bad("--duration: %v is not in [10ms, 24h]", c.Duration)
	}
	if c.Repeat < 1 || c.Repeat > 1000 {
		bad("--repeat: %d is not in [1, 1000]", c.Repeat)
	}
	// Written so that NaN fails too.
	if c.Rate != 0 && !(c.Rate >= minRate && c.Rate <= maxRate) {
		bad("--rate: %g is not 0 (no cap) or in [%g, %g] operations per second", c.Rate, minRate, maxRate)
	}
	if c.Timeout <= 0 || c.Timeout > time.Hour {
		bad("--timeout: %v is not in (0, 1h]", c.Timeout)
	}
	if c.MaxOps < 1 {
		bad("--max-ops: %d is not positive", c.MaxOps)
	}
	if c.Target == "etcd" && (c.TLS != nil || c.User != "") {
		bad("--tls, --cacert, --cert, --key and --user: not supported with --target etcd")
	}
	if c.LoadTimeout <= 0 {
		bad("--load-timeout: %v is not positive", c.LoadTimeout)
	}
	if c.Failover && c.Workload.Mode == ModeMixed && c.Workload.SetRatio == 0 {
		bad("--failover: workload %s never writes; it needs sets (try --get-set 9:1)", c.Workload.Name)
	}
	if err := c.Workload.Validate(c.Target != "etcd", c.Verify); err != nil {
		errs = append(errs, err)
	} else if w := c.Workload; len(c.Concurrency) > 0 && w.Mode != ModeUniqueWrites && !(w.Mode == ModeMixed && w.GetRatio == 0) {
		// Every in-flight get keeps a buffer as large as its value: refuse
		// a sweep whose largest case could not hold them, rather than be
		// killed for memory in the middle of it.
		need := int64(slices.Max(c.Concurrency)) * int64(c.Workload.Pipeline) * int64(c.Workload.ValueSize.Max())
		if need > maxReplyBuffers {
			bad("--concurrency %d × --pipeline %d × values up to %d bytes would hold up to %d MiB of reply buffers (at most %d MiB)",
				slices.Max(c.Concurrency), c.Workload.Pipeline, c.Workload.ValueSize.Max(), need>>20, maxReplyBuffers>>20)
		}
	}
	return errors.Join(errs...)
}
