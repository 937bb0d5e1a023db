// Package kvdproc starts real kvd processes for tests: it builds the binary
// once per test binary, runs `kvd serve` on ephemeral loopback ports with a
// real data directory, and stops only the processes it started, by PID.
// Only tests import it.
package kvdproc

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvd-project/kvd/internal/testing/syncbuf"
)

// build is one kvd binary built at most once per test process.
type build struct {
	once sync.Once
	path string
	dir  string // the temporary directory it was built in; "" for KVD_BIN's
	err  error
}

// builds has one entry per build tag set; its keys are fixed, so concurrent
// tests only read the map.
var builds = map[string]*build{"": {}, "failpoints": {}}

// Binary returns the path of a kvd binary built from this checkout
// (KVD_BIN names a prebuilt one instead).
func Binary(t testing.TB) string {
	t.Helper()
	return builtBinary(t, "KVD_BIN", "")
}

// FailpointBinary returns a kvd built with -tags failpoints, whose
// failpoints KVD_FAILPOINTS arms (internal/failpoint); KVD_FAILPOINT_BIN
// names a prebuilt one instead.
func FailpointBinary(t testing.TB) string {
	t.Helper()
	return builtBinary(t, "KVD_FAILPOINT_BIN", "failpoints")
}

// builtBinary builds ./cmd/kvd with tags (and -race when this test is
// race-built) once per test process.
func builtBinary(t testing.TB, env, tags string) string {
	t.Helper()
	b := builds[tags]
	b.once.Do(func() {
		if p := os.Getenv(env); p != "" {
			b.path = p
			return
		}
		dir, err := os.MkdirTemp("", "kvd-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.dir, b.path = dir, filepath.Join(dir, "kvd")
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		args := []string{"build", "-o", b.path}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/kvd")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s kvd: %v\n%s", tags, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// RemoveBinaries deletes the kvd binaries this test process built (never a
// prebuilt KVD_BIN or KVD_FAILPOINT_BIN). They serve every test of the
// process, so no test's cleanup can remove them: a package's TestMain calls
// this after m.Run, or each run leaves tens of MiB in the temp directory.
func RemoveBinaries() error {
	var errs []error
	for tags, b := range builds {
		if b.dir == "" {
			continue
		}
		if err := os.RemoveAll(b.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove the kvd binary built with tags %q: %w", tags, err))
		}
	}
	return errors.Join(errs...)
}

// Main runs a package's tests, then removes the binaries they built: the
// body of the TestMain of each package that starts kvd through this one.
func Main(m *testing.M) {
	code := m.Run()
	if err := RemoveBinaries(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// Proc is one running kvd.
type Proc struct {
	t            testing.TB
	cmd          *exec.Cmd
	Name         string
	DataDir      string
	MemcacheAddr string
	HTTPAddr     string
	Log          *syncbuf.Buffer
	exited       chan struct{}
	extra        []string
	opts         launchOpts // a restart runs the same binary with the same environment
	// Scheme is "https" when the node's listeners speak TLS (--cert-file
	// among its flags), and Client trusts its CA: see secureClient.
	Scheme string
	Client *http.Client
}

// URL is the address of path on the node's HTTP listener.
func (p *Proc) URL(path string) string { return p.Scheme + "://" + p.HTTPAddr + path }

// secureClient is the HTTP client for a node started with extra: for
// --cert-file PATH it trusts the ca.crt beside PATH and presents the
// client.crt and client.key there if they exist (the layout `kvd certs
// cluster` writes); otherwise it is plain HTTP.
func secureClient(extra []string) (string, *http.Client, error) {
	var cert string
	for i, a := range extra {
		if a == "--cert-file" && i+1 < len(extra) {
			cert = extra[i+1]
		} else if v, ok := strings.CutPrefix(a, "--cert-file="); ok {
			cert = v
		}
	}
	if cert == "" {
		return "http", http.DefaultClient, nil
	}
	dir := filepath.Dir(cert)
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return "", nil, fmt.Errorf("kvdproc: a TLS node's CA is read from ca.crt beside its --cert-file: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")); err == nil {
		tc.Certificates = []tls.Certificate{pair}
	}
	return "https", &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

var servingLine = regexp.MustCompile(`serving memcache on (\S+), http on (\S+)`)

// Start runs `kvd serve` on dataDir with ephemeral ports plus extra flags,
// and returns once it is ready (/readyz says 200). It is killed at cleanup.
func Start(t testing.TB, dataDir string, extra ...string) *Proc {
	t.Helper()
	p := Launch(t, dataDir, "n1", extra...)
	p.WaitReady()
	return p
}

// Launch runs `kvd serve --name name` and returns once it has bound its
// listeners, without waiting for readiness (a cluster member is ready only
// once a quorum is up).
func Launch(t testing.TB, dataDir, name string, extra ...string) *Proc {
	t.Helper()
	p, err := launch(t, dataDir, name, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TryLaunch is Launch returning a start-up failure instead of failing the
// test: a caller that chose the ports itself can retry on new ones when
// PortTaken(err).
func TryLaunch(t testing.TB, dataDir, name string, extra ...string) (*Proc, error) {
	t.Helper()
	return launch(t, dataDir, name, extra...)
}

// PortTaken reports a start-up that lost a race for a port chosen free
// (FreeAddr) to another process that bound it in between.
func PortTaken(err error) bool { return errors.Is(err, errPortTaken) }

// errPortTaken is a start-up that lost a race for a port chosen by
// freeAddr (another test process bound it in between).
var errPortTaken = errors.New("address already in use")

// serveArgs are the arguments of `kvd serve` for a test process: ephemeral
// client ports and fast elections, then extra.
func serveArgs(dataDir, name string, extra []string) []string {
	return append([]string{"serve", "--name", name, "--data-dir", dataDir,
		"--memcache-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--heartbeat-interval", "50ms", "--election-timeout", "500ms"}, extra...)
}

// launch is Launch returning start-up failures; a lost port race wraps
// errPortTaken so that callers choosing ports can retry.
func launch(t testing.TB, dataDir, name string, extra ...string) (*Proc, error) {
	t.Helper()
	return launchWith(t, launchOpts{}, dataDir, name, extra...)
}

// launchOpts are what a cluster's members may differ in beyond flags.
type launchOpts struct {
	bin string   // the kvd to run; "" is Binary's
	env []string // KEY=value added to the environment
}

func launchWith(t testing.TB, o launchOpts, dataDir, name string, extra ...string) (*Proc, error) {
	t.Helper()
	args := serveArgs(dataDir, name, extra)
	p := &Proc{t: t, Name: name, DataDir: dataDir, Log: &syncbuf.Buffer{}, exited: make(chan struct{}), extra: extra, opts: o}
	var err error
	if p.Scheme, p.Client, err = secureClient(extra); err != nil {
		return nil, err
	}
	bin := o.bin
	if bin == "" {
		bin = Binary(t)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(append(os.Environ(), "GORACE=halt_on_error=1"), o.env...)
	p.cmd.Stderr = p.Log
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start kvd: %v", err)
	}
	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- m[1:]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Kill()
		if strings.Contains(p.Log.String(), "WARNING: DATA RACE") {
			t.Errorf("kvd %s hit a data race:\n%s", name, p.Log.String())
		}
		if t.Failed() {
			// What a failure most often needs explained: an election, a
			// warning, an error.
			t.Logf("kvd %s, leader changes, warnings and errors:\n%s", name, notable(p.Log.String(), 40))
		}
	})
	select {
	case a := <-addrs:
		p.MemcacheAddr, p.HTTPAddr = a[0], a[1]
	case <-p.exited:
		log := p.Log.String()
		if strings.Contains(log, "address already in use") {
			return nil, fmt.Errorf("kvd exited during start-up: %w\n%s", errPortTaken, log)
		}
		return nil, fmt.Errorf("kvd exited during start-up: %v\n%s", p.cmd.ProcessState, log)
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("kvd did not report its addresses within 30s\n%s", p.Log.String())
	}
	return p, nil
}

// StartCluster starts n members (n1…nN) of one new cluster on loopback, with
// free peer ports, and returns once every member is ready.
func StartCluster(t testing.TB, n int, extra ...string) []*Proc {
	t.Helper()
	return StartClusterEach(t, n, nil, extra...)
}

// StartClusterEach is StartCluster with flags of each member's own after
// extra: each(name), when each is not nil (a member's own certificate,
// say).
func StartClusterEach(t testing.TB, n int, each func(name string) []string, extra ...string) []*Proc {
	t.Helper()
	return startClusterRetrying(t, n, launchOpts{}, nil, each, extra...)
}

// StartFailpointCluster is StartCluster on FailpointBinary, with env(name)
// added to each member's environment (KVD_CLOCK_OFFSET_FILE, say).
func StartFailpointCluster(t testing.TB, n int, env func(name string) []string, extra ...string) []*Proc {
	t.Helper()
	return startClusterRetrying(t, n, launchOpts{bin: FailpointBinary(t)}, env, nil, extra...)
}

func startClusterRetrying(t testing.TB, n int, o launchOpts, env, each func(name string) []string, extra ...string) []*Proc {
	t.Helper()
	// Peer ports are picked free and bound only later by kvd, so a parallel
	// test can take one in between: start the cluster again on new ports.
	for attempt := 1; ; attempt++ {
		procs, err := startCluster(t, n, o, env, each, extra...)
		if err == nil {
			for _, p := range procs {
				p.WaitReady()
			}
			return procs
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("cluster start lost a port race (attempt %d); retrying on new ports", attempt)
	}
}

func startCluster(t testing.TB, n int, o launchOpts, env, each func(string) []string, extra ...string) ([]*Proc, error) {
	t.Helper()
	var members []string
	for i := 1; i <= n; i++ {
		members = append(members, fmt.Sprintf("n%d=%s", i, freeAddr(t)))
	}
	procs := make([]*Proc, 0, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("n%d", i+1)
		peer := strings.SplitN(members[i], "=", 2)[1]
		args := append([]string{"--peer-addr", peer, "--initial-cluster", strings.Join(members, ",")}, extra...)
		if each != nil {
			args = append(args, each(name)...)
		}
		mo := o
		if env != nil {
			mo.env = env(name)
		}
		p, err := launchWith(t, mo, filepath.Join(t.TempDir(), name), name, args...)
		if err != nil {
			for _, q := range procs {
				q.Kill()
			}
			return nil, err
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// FreeAddr returns a loopback address with a port free right now.
func FreeAddr(t testing.TB) string { return freeAddr(t) }

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := PickPort()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Ports PickPort chooses from: below Linux's default ephemeral range
// (32768-60999), which the kernel takes the local ports of outgoing
// connections from. A port picked there (as ":0" picks) and handed to a
// kvd started later, or restarted on it, could meanwhile have become the
// local end of any client connection on the machine, and the kvd then fails
// with "address already in use"; below the range only another listener can
// take it.
const (
	pickLow  = 20000
	pickHigh = 32767
)

// PickPort returns a loopback address whose port is free now and outside
// the ephemeral range, for a process that binds it later (and again at a
// restart). It falls back to a kernel-chosen port if none is found.
func PickPort() (string, error) {
	for range 64 {
		port := pickLow + rand.IntN(pickHigh-pickLow+1)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			addr := l.Addr().String()
			l.Close()
			return addr, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// WaitReady polls /readyz until it answers 200.
func (p *Proc) WaitReady() {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := p.Client.Get(p.URL("/readyz"))
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.exited:
			p.t.Fatalf("kvd exited before it was ready\n%s", p.Log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("kvd not ready after 30s\n%s", p.Log.String())
}

// WaitClusterVersion polls /v1/version until the node has applied its
// cluster's move to the highest version its binary applies: the leader
// raises it once every member says it applies it, shortly after they are
// ready. Tests of behaviour gated on that version wait for it first.
func (p *Proc) WaitClusterVersion() {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var v struct {
		Cur uint64 `json:"cluster_version"`
		Max uint64 `json:"max_cluster_version"`
	}
	for time.Now().Before(deadline) {
		resp, err := p.Client.Get(p.URL("/v1/version"))
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&v)
			_ = resp.Body.Close()
			if err == nil && v.Max > 0 && v.Cur == v.Max {
				return
			}
		}
		select {
		case <-p.exited:
			p.t.Fatalf("kvd exited\n%s", p.Log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("cluster version still %d of %d after 30s\n%s", v.Cur, v.Max, p.Log.String())
}

// PID is the process ID, for reading /proc/PID (memory use in overload
// tests) and for signalling it directly.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// ExitCode waits for the process to exit and returns its exit code.
func (p *Proc) ExitCode() int {
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}

// Kill sends SIGKILL (no shutdown path runs) and waits for the exit.
func (p *Proc) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Pause stops the process with SIGSTOP: it holds its sockets and state but
// runs nothing, as in a long GC pause or a stalled VM, until Resume.
func (p *Proc) Pause() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		p.t.Fatalf("SIGSTOP %s: %v", p.Name, err)
	}
}

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		p.t.Fatalf("SIGCONT %s: %v", p.Name, err)
	}
}

// Stop sends SIGTERM and waits for a clean exit, failing the test otherwise.
func (p *Proc) Stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.Kill()
		p.t.Fatalf("kvd did not stop within 30s of SIGTERM\n%s", p.Log.String())
	}
	if !p.cmd.ProcessState.Success() {
		p.t.Fatalf("kvd exited uncleanly after SIGTERM: %v\n%s", p.cmd.ProcessState, p.Log.String())
	}
}

// Restart starts a new process on the same data dir with the same flags and
// waits until it is ready.
func (p *Proc) Restart() *Proc {
	p.t.Helper()
	q := p.RelaunchWith()
	q.WaitReady()
	return q
}

// Relaunch is Restart without waiting for readiness: for a member that is
// not expected to reach a quorum.
func (p *Proc) Relaunch() *Proc {
	p.t.Helper()
	return p.RelaunchWith()
}

// RelaunchWith is Relaunch with more flags after p's: a start with a
// one-time flag (--force-new-cluster, say), which p.Restart later leaves
// out again.
func (p *Proc) RelaunchWith(more ...string) *Proc {
	p.t.Helper()
	q, err := launchWith(p.t, p.opts, p.DataDir, p.Name, append(slices.Clone(p.extra), more...)...)
	if err != nil {
		p.t.Fatal(err)
	}
	return q
}

// RunAgain runs `kvd serve` once more on p's data dir with p's flags, for a
// process expected to exit by itself, and waits for that within timeout. It
// returns the exit code and what the process logged; -1 if it was still
// running at the timeout (it is then killed).
func (p *Proc) RunAgain(timeout time.Duration) (int, string) {
	p.t.Helper()
	var log syncbuf.Buffer
	cmd := exec.Command(Binary(p.t), serveArgs(p.DataDir, p.Name, p.extra)...)
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	cmd.Stdout, cmd.Stderr = io.Discard, &log
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start kvd: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode(), log.String()
	case <-time.After(timeout):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return -1, log.String()
	}
}

// GetJSON GETs http://httpAddr+path, requires a 200 and decodes the body
// into v.
func GetJSON(t testing.TB, httpAddr, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", httpAddr, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %s", httpAddr, path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s%s: decode: %v", httpAddr, path, err)
	}
}

// Context returns a context for the test's remaining time budget.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// notable returns the last max lines of a kvd log that report a leader
// change, a warning or an error.
func notable(log string, max int) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "leader changed") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			keep = append(keep, l)
		}
	}
	if len(keep) > max {
		keep = keep[len(keep)-max:]
	}
	return strings.Join(keep, "\n")
}
