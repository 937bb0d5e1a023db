package bench

import (
	"bufio"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rank of a percentile is ceil(q/100 × n) exactly: the reported
// percentiles have at most three decimals, so q×1000 is an integer and the
// exact rank is an integer ceiling.
func TestPercentileRankIsExact(t *testing.T) {
	ns := []uint64{1, 2, 3, 7, 10, 99, 100, 101, 999, 1000, 1001, 1_000_000, 123_456_789, 1_000_000_000}
	for n := uint64(1); n <= 20000; n++ {
		ns = append(ns, n)
	}
	for _, q := range []float64{0.1, 1, 10, 25, 50, 75, 90, 95, 97, 99, 99.5, 99.9, 99.95, 99.99, 99.999} {
		qm := uint64(q*1000 + 0.5)
		for _, n := range ns {
			want := max((qm*n+100_000-1)/100_000, 1)
			if got := percentileRank(q, n); got != want {
				t.Fatalf("rank of p%g of %d observations: %d, want %d", q, n, got, want)
			}
		}
	}
}

func TestHistogramPercentileEdges(t *testing.T) {
	// 999 fast ops and one slow one: p99.9 is the 999th, a fast one.
	thousand := NewHistogram()
	for range 999 {
		thousand.Record(time.Microsecond)
	}
	thousand.Record(time.Second)

	one := NewHistogram()
	one.Record(3 * time.Millisecond)

	// Latencies above the histogram's range (about 18 minutes) share its
	// last bucket; a percentile there must not understate them.
	huge := NewHistogram()
	for range 50 {
		huge.Record(30 * time.Minute)
		huge.Record(time.Hour)
	}

	for _, tc := range []struct {
		name   string
		h      *Histogram
		q      float64
		lo, hi time.Duration // the answer lies in [lo, hi]
	}{
		{"empty p50", NewHistogram(), 50, 0, 0},
		{"empty p100", NewHistogram(), 100, 0, 0},
		{"one p0", one, 0, 3 * time.Millisecond, 3 * time.Millisecond},
		{"one p50", one, 50, 3 * time.Millisecond, 3 * time.Millisecond},
		{"one p99.9", one, 99.9, 3 * time.Millisecond, 3 * time.Millisecond},
		{"one p100", one, 100, 3 * time.Millisecond, 3 * time.Millisecond},
		{"thousand p99", thousand, 99, time.Microsecond, time.Microsecond + time.Microsecond/histSubCount},
		{"thousand p99.9", thousand, 99.9, time.Microsecond, time.Microsecond + time.Microsecond/histSubCount},
		{"thousand p100", thousand, 100, time.Second, time.Second},
		{"huge p25", huge, 25, 30 * time.Minute, time.Hour},
		{"huge p90", huge, 90, time.Hour, time.Hour},
		{"huge p99.9", huge, 99.9, time.Hour, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.h.Percentile(tc.q)
			assert.GreaterOrEqual(t, got, tc.lo)
			assert.LessOrEqual(t, got, tc.hi)
		})
	}
}

// --max-ops is reached, not undershot, when the pipeline is deeper than
// what is left of it.
func TestMaxOpsWithDeepPipeline(t *testing.T) {
	f := startFakeMC(t, nil)
	for _, tc := range []struct{ conc, pipeline, maxOps int }{
		{1, 16, 10},
		{3, 4, 10},
		{2, 8, 101},
	} {
		cfg := testConfig(t, "custom", f.addr())
		cfg.Workload.Preload = false
		cfg.Workload.Pipeline = tc.pipeline
		cfg.Concurrency = []int{tc.conc}
		cfg.MaxOps = int64(tc.maxOps)
		cfg.Duration = 30 * time.Second // MaxOps ends the run
		rep := mustRun(t, cfg)
		assert.Equal(t, int64(tc.maxOps), rep.Totals.Ops, "conc %d pipeline %d max-ops %d", tc.conc, tc.pipeline, tc.maxOps)
		assert.Zero(t, rep.Totals.Errors)
	}
}

// Import's read phase writes nothing: --failover must not report its whole
// length as a window that never recovered.
func TestFailoverSkipsPhasesWithoutWrites(t *testing.T) {
	f := startFakeMC(t, nil)
	cfg := testConfig(t, "import", f.addr())
	cfg.Workload.Records = 200
	cfg.Failover = true
	cfg.Duration = 30 * time.Second // the records end each phase
	rep := mustRun(t, cfg)
	require.Len(t, rep.Cases, 2)
	read := rep.Cases[1]
	require.Equal(t, "read", read.Phase)
	assert.Equal(t, int64(200), read.Summary.Counts.Hits)
	assert.Nil(t, read.Runs[0].Failover)
	assert.Nil(t, read.Summary.Failover)
	var text strings.Builder
	require.NoError(t, WriteText(&text, rep))
	assert.NotContains(t, text.String(), "failover read")
}

// dialThenDropDriver: every Dial takes a while; every Do answers its ops
// at once, stamped with the moment the connection was made, then drops
// the connection so that the next batch dials again.
type dialThenDropDriver struct{}

func (dialThenDropDriver) Name() string       { return "memcache" }
func (dialThenDropDriver) MemcacheKeys() bool { return true }
func (dialThenDropDriver) Info(context.Context, string, time.Duration) (map[string]string, error) {
	return map[string]string{"version": "fake"}, nil
}

func (dialThenDropDriver) Dial(context.Context, string, time.Duration) (Conn, error) {
	time.Sleep(2 * time.Millisecond)
	return &stampedConn{dialed: time.Now()}, nil
}

type stampedConn struct{ dialed time.Time }

func (c *stampedConn) Do(_ context.Context, ops []Op, res []Result) error {
	for i := range ops {
		res[i] = Result{Done: c.dialed}
	}
	return errors.New("dropped")
}

func (c *stampedConn) Close() error { return nil }

func runWithDriver(t *testing.T, cfg Config, drv Driver) *Report {
	t.Helper()
	require.NoError(t, cfg.Validate())
	r := &runner{cfg: cfg, drv: drv, w: cfg.Workload, runID: "test"}
	r.body = newBodySource(rand.New(rand.NewPCG(cfg.Seed, 7)), max(r.w.ValueSize.Max(), 1))
	return r.run(context.Background())
}

// A reconnect before a batch is not part of the batch's latency: latency
// runs from writing the requests (bench/METHOD.md). The fake stamps every
// reply with the end of the dial, so the measured latency is that stamp
// minus the batch's start: at most 0 when the start follows the dial.
func TestRedialIsNotInTheLatency(t *testing.T) {
	cfg := testConfig(t, "custom", "127.0.0.1:1")
	cfg.Workload.Preload = false
	cfg.Concurrency = []int{1}
	cfg.MaxOps = 20
	cfg.Duration = 30 * time.Second // MaxOps ends the run
	rep := runWithDriver(t, cfg, dialThenDropDriver{})
	require.Len(t, rep.Cases, 1)
	c := rep.Cases[0].Summary
	require.Equal(t, int64(20), c.Counts.Ops)
	assert.Zero(t, c.Latency.MaxUs, "a reconnect counted in the latency")
}

// scriptedConn is an mcConn talking to a server that sends reply, one byte
// at a time (every read is partial), then closes.
func scriptedConn(t *testing.T, reply string) *mcConn {
	t.Helper()
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		go func() { _, _ = readAll(server) }() // swallow the requests
		for i := range len(reply) {
			if _, err := server.Write([]byte{reply[i]}); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = client.Close() })
	return &mcConn{nc: client, r: bufio.NewReaderSize(client, mcBufSize), w: bufio.NewWriterSize(client, mcBufSize), timeout: 5 * time.Second}
}

func readAll(c net.Conn) (int, error) {
	buf := make([]byte, 4096)
	total := 0
	for range 1 << 20 {
		n, err := c.Read(buf)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Every reply memcached can send to a get or a set, delivered a byte at a
// time: what each op gets, and whether the connection is given up.
func TestMemcacheRepliesByteByByte(t *testing.T) {
	set := func(k string) Op { return Op{Kind: OpSet, Key: []byte(k), Value: []byte("v")} }
	get := func(k string) Op { return Op{Kind: OpGet, Key: []byte(k)} }
	type want struct {
		kind string // "" for success
		hit  bool
		val  string
	}
	for _, tc := range []struct {
		name  string
		ops   []Op
		reply string
		want  []want
		fatal string // kind of Do's error, "" for none
	}{
		{"stored", []Op{set("a"), set("b")}, "STORED\r\nSTORED\r\n", []want{{}, {}}, ""},
		{"not stored kinds", []Op{set("a"), set("b"), set("c"), set("d")}, "NOT_STORED\r\nEXISTS\r\nNOT_FOUND\r\nSTORED\r\n",
			[]want{{kind: ErrNotStored}, {kind: ErrNotStored}, {kind: ErrNotStored}, {}}, ""},
		{"server error keeps the connection", []Op{set("a"), get("b"), set("c")},
			"SERVER_ERROR out of memory storing object\r\nSERVER_ERROR unavailable: no quorum or leader\r\nSTORED\r\n",
			[]want{{kind: ErrServer}, {kind: ErrServer}, {}}, ""},
		{"client error aborts the rest", []Op{set("a"), set("b"), get("c")}, "CLIENT_ERROR bad data chunk\r\nERROR\r\n",
			[]want{{kind: ErrClient}, {kind: ErrAborted}, {kind: ErrAborted}}, ErrClient},
		{"bare error", []Op{get("a"), get("b")}, "ERROR\r\n", []want{{kind: ErrUnknownCommand}, {kind: ErrAborted}}, ErrUnknownCommand},
		{"miss and hits", []Op{get("a"), get("b"), get("c")}, "END\r\nVALUE b 0 4\r\nx\r\ny\r\nEND\r\nVALUE c 5 0 99\r\n\r\nEND\r\n",
			[]want{{}, {hit: true, val: "x\r\ny"}, {hit: true, val: ""}}, ""},
		{"value of another key", []Op{get("a"), get("b")}, "VALUE b 0 1\r\nx\r\nEND\r\n",
			[]want{{kind: ErrProtocol}, {kind: ErrAborted}}, ErrProtocol},
		{"negative length", []Op{get("a")}, "VALUE a 0 -1\r\n", []want{{kind: ErrProtocol}}, ErrProtocol},
		{"length over the limit", []Op{get("a")}, "VALUE a 0 999999999999\r\n", []want{{kind: ErrProtocol}}, ErrProtocol},
		{"value not terminated", []Op{get("a")}, "VALUE a 0 1\r\nxyEND\r\n", []want{{kind: ErrProtocol}}, ErrProtocol},
		{"no END after the value", []Op{get("a")}, "VALUE a 0 1\r\nx\r\nSTORED\r\n", []want{{kind: ErrProtocol}}, ErrProtocol},
		{"bare LF", []Op{set("a")}, "STORED\n", []want{{kind: ErrProtocol}}, ErrProtocol},
		{"unknown line", []Op{set("a")}, "OK\r\n", []want{{kind: ErrProtocol}}, ErrProtocol},
		{"closed mid-value", []Op{get("a"), get("b")}, "VALUE a 0 10\r\nxyz", []want{{kind: ErrConnClosed}, {kind: ErrConnClosed}}, ErrConnClosed},
		{"closed before a reply", []Op{set("a"), set("b")}, "STORED\r\n", []want{{}, {kind: ErrConnClosed}}, ErrConnClosed},
		{"closed mid-line", []Op{set("a")}, "STOR", []want{{kind: ErrConnClosed}}, ErrConnClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scriptedConn(t, tc.reply)
			res := make([]Result, len(tc.ops))
			err := c.Do(context.Background(), tc.ops, res)
			if tc.fatal == "" {
				require.NoError(t, err)
			} else {
				var oe *OpError
				require.ErrorAs(t, err, &oe)
				assert.Equal(t, tc.fatal, oe.Kind)
			}
			for i, w := range tc.want {
				r := res[i]
				if w.kind == "" {
					assert.Nil(t, r.Err, "op %d", i)
				} else if assert.NotNil(t, r.Err, "op %d", i) {
					assert.Equal(t, w.kind, r.Err.Kind, "op %d: %v", i, r.Err)
				}
				assert.Equal(t, w.hit, r.Hit, "op %d", i)
				if w.hit {
					assert.Equal(t, w.val, string(r.Value), "op %d", i)
				}
				assert.False(t, r.Done.IsZero(), "op %d not stamped", i)
			}
		})
	}
}

func TestConfigRefusesReplyBuffersBeyondTheBound(t *testing.T) {
	base := func(conc, pipeline, value int) Config {
		w, err := Preset("membrain")
		require.NoError(t, err)
		w.Pipeline = pipeline
		w.ValueSize = SizeDist{{Min: value, Max: value, Weight: 1}}
		return Config{Target: "memcache", Servers: []string{"127.0.0.1:1"}, Workload: w,
			Concurrency: []int{1, conc}, Duration: time.Second, Repeat: 1, Timeout: time.Second,
			MaxOps: 1, LoadTimeout: time.Second}
	}
	tests := []struct {
		name                  string
		conc, pipeline, value int
		wantErr               bool
	}{
		{"4096 connections of 1 MiB values", 4096, 1, 1 << 20, false},
		{"8 GiB exactly", 4096, 2, 1 << 20, false},
		{"1 TiB", 4096, 256, 1 << 20, true},
		{"deep pipeline of small values", 4096, 256, 512, false},
	}
	t.Run("sets only keep no reply buffers", func(t *testing.T) {
		cfg := base(4096, 256, 1<<20)
		cfg.Workload.GetRatio, cfg.Workload.SetRatio = 0, 1
		require.NoError(t, cfg.Validate())
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base(tt.conc, tt.pipeline, tt.value)
			err := cfg.Validate()
			if tt.wantErr {
				require.ErrorContains(t, err, "reply buffers")
			} else {
				require.NoError(t, err)
			}
		})
	}
}
