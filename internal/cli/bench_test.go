package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func runBenchArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runArgs(t, append([]string{"bench"}, args...)...)
}

func TestBenchBadFlagsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--workload", "custom"}, "--servers"},
		{[]string{"--servers", "127.0.0.1:1", "--concurrency", "0"}, "--concurrency"},
		{[]string{"--servers", "127.0.0.1:1", "--concurrency", "1,x"}, "--concurrency"},
		{[]string{"--servers", "127.0.0.1:1", "--workload", "nope"}, "--workload"},
		{[]string{"--servers", "127.0.0.1:1", "--workload", "custom", "--get-set", "9"}, "--get-set"},
		{[]string{"--servers", "127.0.0.1:1", "--workload", "keyspace-write", "--get-set", "9:1"}, "--get-set"},
		{[]string{"--servers", "127.0.0.1:1", "--workload", "membrain", "--records", "10"}, "--records"},
		{[]string{"--servers", "127.0.0.1:1", "--value-size", "big"}, "--value-size"},
		{[]string{"--servers", "127.0.0.1:1", "--key-size", "251"}, "--key-size"},
		{[]string{"--servers", "127.0.0.1:1", "--duration", "0s"}, "--duration"},
		{[]string{"--servers", "127.0.0.1:1", "--repeat", "0"}, "--repeat"},
		{[]string{"--servers", "127.0.0.1:1", "--progress", "maybe"}, "--progress"},
		{[]string{"--servers", "127.0.0.1:1", "--target", "redis"}, "--target"},
		{[]string{"--servers", "localhost"}, "--servers"},
		{[]string{"--servers", "127.0.0.1:1", "--miss-ratio", "1.5"}, "--miss-ratio"},
		{[]string{"--servers", "127.0.0.1:1", "--json", "/nonexistent-dir/x.json", "--duration", "10ms"}, "--json"},
	} {
		_, _, err := runBenchArgs(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v does not name %s", tc.args, err, tc.flag)
		}
	}
}

func closedLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestBenchUnreachableServerEndsCleanly(t *testing.T) {
	addr := closedLoopbackAddr(t)
	out, _, err := runBenchArgs(t, "--servers", addr, "--workload", "custom", "--concurrency", "1", "--duration", "50ms")
	if err != nil {
		t.Fatalf("without --fail-on-error: %v", err)
	}
	if !strings.Contains(out, "did not answer") || !strings.Contains(out, "connect_refused") {
		t.Fatalf("report does not show the unreachable server:\n%s", out)
	}
	_, _, err = runBenchArgs(t, "--servers", addr, "--workload", "custom", "--concurrency", "1", "--duration", "50ms", "--fail-on-error")
	var ec interface{ ExitCode() int }
	if !errors.As(err, &ec) || ec.ExitCode() != 3 {
		t.Fatalf("with --fail-on-error: %v", err)
	}
}

// startStubMemcached answers every set STORED and every get END: enough
// for the command's plumbing (flags, files), not for the engine's checks.
func startStubMemcached(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				r, w := bufio.NewReader(c), bufio.NewWriter(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					f := strings.Fields(line)
					switch {
					case len(f) == 5 && f[0] == "set":
						n, _ := strconv.Atoi(f[4])
						if _, err := io.CopyN(io.Discard, r, int64(n)+2); err != nil {
							return
						}
						w.WriteString("STORED\r\n")
					case len(f) > 0 && f[0] == "version":
						w.WriteString("VERSION stub\r\n")
					default:
						w.WriteString("END\r\n")
					}
					if r.Buffered() == 0 && w.Flush() != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestBenchWritesJSONAndHTML(t *testing.T) {
	addr := startStubMemcached(t)
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")
	out, errOut, err := runBenchArgs(t, "--servers", addr, "--workload", "custom", "--get-set", "1:1", "--keys", "100",
		"--concurrency", "1,2", "--duration", "2s", "--max-ops", "500", "--json", jsonPath, "--html", htmlPath, "--progress", "never")
	if err != nil {
		t.Fatal(err)
	}
	if errOut != "" {
		t.Fatalf("stderr: %q", errOut)
	}
	if !strings.Contains(out, "p99.9") || !strings.Contains(out, "errors: none") {
		t.Fatalf("text report:\n%s", out)
	}
	var rep struct {
		Cases []struct {
			Concurrency int `json:"concurrency"`
			Summary     struct {
				Counts struct{ Ops, Hits, Misses, Sets, Errors int64 } `json:"counts"`
			} `json:"summary"`
		} `json:"cases"`
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != 2 || rep.Cases[1].Concurrency != 2 {
		t.Fatalf("json cases %+v", rep.Cases)
	}
	for _, c := range rep.Cases {
		k := c.Summary.Counts
		if k.Ops == 0 || k.Ops != k.Hits+k.Misses+k.Sets+k.Errors {
			t.Fatalf("json counts %+v", k)
		}
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "Throughput vs concurrency", "Latency vs concurrency"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("html lacks %q", want)
		}
	}
	for _, banned := range []string{"<script", "https://", "<link"} {
		if bytes.Contains(page, []byte(banned)) {
			t.Errorf("html is not self-contained: contains %q", banned)
		}
	}
}

func TestBenchProgressOnlyOnATerminal(t *testing.T) {
	addr := startStubMemcached(t)
	// A run longer than the 1 s progress tick, with stderr a buffer.
	_, errOut, err := runBenchArgs(t, "--servers", addr, "--workload", "custom", "--concurrency", "1",
		"--duration", "1100ms", "--keys", "100", "--rate", "2000")
	if err != nil {
		t.Fatal(err)
	}
	if errOut != "" {
		t.Fatalf("--progress auto wrote to a non-terminal: %q", errOut)
	}
}
