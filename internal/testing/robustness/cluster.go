package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// Timing is the raft timing every node of a run gets. Short timeouts keep
// runs fast; a pause or partition is sized from ElectionTimeout.
type Timing struct {
	Heartbeat       time.Duration
	ElectionTimeout time.Duration
	RequestTimeout  time.Duration
}

// DefaultTiming is short enough for many runs a minute and long enough for
// a shared 2-core machine not to see spurious elections everywhere.
var DefaultTiming = Timing{Heartbeat: 50 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond, RequestTimeout: 2 * time.Second}

// Node is one kvd member: its fixed addresses survive restarts so that
// pinned clients and the proxies keep pointing at it.
type Node struct {
	Name string
	ID   uint64 // learned from /v1/cluster once it runs
	// Witness: the node is a witness, which holds no data and refuses
	// data requests; clients never send it one.
	Witness      bool
	DataDir      string
	LogPath      string
	MemcacheAddr string
	HTTPAddr     string
	PeerAddr     string // the real listener, behind the proxy
	ProxyAddr    string // the proxy in front of PeerAddr, which members dial ("" for one node)
	args         []string
	bin          string
	// sec: the run is secured; clients dial with TLS and log in.
	sec *Security

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
	// nextEnv goes to the next launch only (SetNextEnv).
	nextEnv []string
}

// SetNextEnv adds environment variables (KEY=value) to the node's next
// launch only, e.g. KVD_FAILPOINTS to arm a failpoint: the launch after it
// runs without them again.
func (n *Node) SetNextEnv(env ...string) {
	n.mu.Lock()
	n.nextEnv = env
	n.mu.Unlock()
}

// Cluster is the processes of one run and the network between them.
type Cluster struct {
	Nodes  []*Node
	Net    *Network // nil for a single node
	Timing Timing
	// StartRetries are the errors of start attempts that were retried.
	StartRetries []string
	// Sec is the run's TLS and credentials; nil for a plaintext run.
	Sec  *Security
	http *http.Client
	// adminHTTP is for requests that may wait on raft (a transfer, a
	// membership change, forwarded to the leader): http's 2s are too
	// short for those.
	adminHTTP *http.Client
}

func freeAddr() (string, error) {
	// Below the ephemeral range: a node restarted on its port must not
	// find it taken by some connection's local end (kvdproc.PickPort).
	return kvdproc.PickPort()
}

// StartCluster launches the members of topo (n1…, the witnesses last,
// named in every member's --initial-witnesses) under dir with binary bin
// and waits until each is ready and knows its ID. The extra flags go to
// every node after the harness's own (later flags win). With sec, every
// member also gets sec's TLS, peer mTLS and --auth-file flags, and the
// proxies and clients speak TLS (Security).
//
// Ports are picked free and then handed to kvd, so another process (on a
// shared machine, another test) can take one in between. A start in which
// a node exits is therefore retried from scratch with new ports, up to
// three times; the failed attempts are returned in Cluster.StartRetries so
// that a node that dies at start-up for another reason is still reported.
func StartCluster(ctx context.Context, bin, dir string, topo Topology, tm Timing, sec *Security, extra ...string) (*Cluster, error) {
	var retries []string
	for attempt := 1; ; attempt++ {
		c, err := startCluster(ctx, bin, dir, topo, tm, sec, extra...)
		if err == nil {
			c.StartRetries = retries
			return c, nil
		}
		if !errors.Is(err, errGiveUp) || attempt == 3 {
			return nil, err
		}
		retries = append(retries, err.Error())
		for i := 1; i <= topo.Size(); i++ {
			name := fmt.Sprintf("n%d", i)
			_ = os.RemoveAll(filepath.Join(dir, name))
			_ = os.Remove(filepath.Join(dir, name+".log"))
		}
	}
}

func startCluster(ctx context.Context, bin, dir string, topo Topology, tm Timing, sec *Security, extra ...string) (*Cluster, error) {
	c := &Cluster{Timing: tm, Sec: sec, http: &http.Client{Timeout: 2 * time.Second}, adminHTTP: &http.Client{Timeout: 15 * time.Second}}
	if sec != nil {
		c.http, c.adminHTTP = sec.httpClient(2*time.Second), sec.httpClient(15*time.Second)
	}
	var members []string
	size := topo.Size()
	for i := 1; i <= size; i++ {
		n := &Node{Name: fmt.Sprintf("n%d", i), Witness: i > topo.Data, bin: bin, sec: sec}
		n.DataDir = filepath.Join(dir, n.Name)
		n.LogPath = filepath.Join(dir, n.Name+".log")
		for _, p := range []*string{&n.MemcacheAddr, &n.HTTPAddr, &n.PeerAddr} {
			a, err := freeAddr()
			if err != nil {
				return nil, err
			}
			*p = a
		}
		c.Nodes = append(c.Nodes, n)
	}
	if size > 1 {
		c.Net = NewNetwork()
		c.Net.sec = sec
		for _, n := range c.Nodes {
			pa, err := c.Net.addProxy(n.Name, n.PeerAddr)
			if err != nil {
				_ = c.Net.Close()
				return nil, err
			}
			n.ProxyAddr = pa
			members = append(members, n.Name+"="+pa)
		}
	}
	for _, n := range c.Nodes {
		n.args = []string{"serve", "--name", n.Name, "--data-dir", n.DataDir,
			"--memcache-addr", n.MemcacheAddr, "--http-addr", n.HTTPAddr, "--peer-addr", n.PeerAddr,
			"--heartbeat-interval", tm.Heartbeat.String(), "--election-timeout", tm.ElectionTimeout.String(),
			"--request-timeout", tm.RequestTimeout.String()}
		if size > 1 {
			n.args = append(n.args, "--initial-cluster", strings.Join(members, ","))
		}
		if w := topo.WitnessNames(); len(w) > 0 {
			n.args = append(n.args, "--initial-witnesses", strings.Join(w, ","))
		}
		if sec != nil {
			n.args = append(n.args, sec.flags(n.Name)...)
		}
		n.args = append(n.args, extra...)
		if err := n.launch(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitReady(ctx, c.Nodes...); err != nil {
		c.Close()
		return nil, err
	}
	for _, n := range c.Nodes {
		st, err := c.Status(ctx, n)
		if err != nil {
			c.Close()
			return nil, err
		}
		id, err := strconv.ParseUint(st.Self, 16, 64)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: node ID %q: %w", n.Name, st.Self, err)
		}
		n.ID = id
	}
	return c, nil
}

func (n *Node) launch() error {
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s log: %w", n.Name, err)
	}
	n.mu.Lock()
	env := n.nextEnv
	n.nextEnv = nil
	n.mu.Unlock()
	fmt.Fprintf(logf, "\n==== robustness: start %s at %s %v ====\n", n.Name, time.Now().Format(time.RFC3339Nano), env)
	cmd := exec.Command(n.bin, n.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(append(os.Environ(), "GORACE=halt_on_error=1"), env...)
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited, n.paused = cmd, exited, false
	n.mu.Unlock()
	return nil
}

// Running reports whether the node's process is alive (paused counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	ex := n.exited
	n.mu.Unlock()
	if ex == nil {
		return false
	}
	select {
	case <-ex:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the node's own process, by PID, and waits for it.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, ex := n.cmd, n.exited
	n.paused = false
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-ex
}

// Pause stops the process with SIGSTOP; Resume continues it.
func (n *Node) Pause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return errors.New(n.Name + " is not running")
	}
	n.paused = true
	return n.cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume sends SIGCONT if the node was paused.
func (n *Node) Resume() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || !n.paused {
		return nil
	}
	n.paused = false
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume %s: %w", n.Name, err)
	}
	return nil
}

// Restart launches the node again on its data dir with the same flags; it
// does not wait for readiness (a lone member of a dead quorum is not ready).
func (n *Node) Restart() error {
	if n.Running() {
		return fmt.Errorf("restart %s: still running", n.Name)
	}
	return n.launch()
}

// Close kills every node and stops the proxies.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.Net != nil {
		_ = c.Net.Close()
	}
}

// Status is the part of /v1/cluster the harness reads.
type Status struct {
	Self    string `json:"self"`
	Leader  string `json:"leader"`
	Ready   bool   `json:"ready"`
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
}

// Status fetches n's /v1/cluster.
func (c *Cluster) Status(ctx context.Context, n *Node) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.HTTPAddr+"/v1/cluster", nil)
	if err != nil {
		return st, fmt.Errorf("status of %s: %w", n.Name, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return st, fmt.Errorf("status of %s: %w", n.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status of %s: HTTP %d", n.Name, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("status of %s: %w", n.Name, err)
	}
	return st, nil
}

// errGiveUp marks an error after which polling cannot succeed.
var errGiveUp = errors.New("giving up")

// poll calls f every 25ms until it reports done, fails with errGiveUp, or
// within elapses.
func poll(ctx context.Context, within time.Duration, what string, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if errors.Is(err, errGiveUp) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: not within %s (last error: %w)", what, within, last)
			}
			return fmt.Errorf("%s: not within %s", what, within)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// WaitReady waits until every given node answers /readyz with 200.
func (c *Cluster) WaitReady(ctx context.Context, nodes ...*Node) error {
	for _, n := range nodes {
		err := poll(ctx, 30*time.Second, n.Name+" ready", func() (bool, error) {
			if !n.Running() {
				return false, fmt.Errorf("%w: %s exited; its log ends:\n%s", errGiveUp, n.Name, logTail(n.LogPath, 15))
			}
			resp, err := c.http.Get("http://" + n.HTTPAddr + "/readyz")
			if err != nil {
				return false, err
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// WaitClusterVersion waits until every node has applied the cluster's move
// to the highest version its binary applies (the leader raises it once
// every member says it can, shortly after they are ready): below version
// 5 the meta writes are refused with SERVER_ERROR, which would leave a
// meta client's first writes of every run unknown outcomes.
func (c *Cluster) WaitClusterVersion(ctx context.Context, within time.Duration) error {
	for _, n := range c.Nodes {
		var v struct {
			Cur uint64 `json:"cluster_version"`
			Max uint64 `json:"max_cluster_version"`
		}
		err := poll(ctx, within, n.Name+"'s cluster version at its highest", func() (bool, error) {
			if err := c.getJSON(ctx, "http://"+n.HTTPAddr+"/v1/version", &v); err != nil {
				return false, err
			}
			return v.Max > 0 && v.Cur == v.Max, nil
		})
		if err != nil {
			return fmt.Errorf("%w (at %d of %d)", err, v.Cur, v.Max)
		}
	}
	return nil
}

// Leader returns the node that every reachable, running node agrees leads,
// polling until one does.
func (c *Cluster) Leader(ctx context.Context, within time.Duration) (*Node, error) {
	var lead *Node
	err := poll(ctx, within, "a leader", func() (bool, error) {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			st, err := c.Status(ctx, n)
			if err != nil {
				continue
			}
			if st.Leader != "" && st.Leader == st.Self {
				lead = n
				return true, nil
			}
		}
		return false, nil
	})
	return lead, err
}

// Others returns every node but n.
func (c *Cluster) Others(n *Node) []*Node {
	var out []*Node
	for _, m := range c.Nodes {
		if m != n {
			out = append(out, m)
		}
	}
	return out
}

// DataNodes returns the nodes that hold data: every node but the
// witnesses. Clients, the final reads and the digests use these only.
func (c *Cluster) DataNodes() []*Node { return dataOnly(c.Nodes) }

// Witnesses returns the witnesses.
func (c *Cluster) Witnesses() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Witness {
			out = append(out, n)
		}
	}
	return out
}

// dataOnly returns the nodes of nodes that hold data.
func dataOnly(nodes []*Node) []*Node {
	var out []*Node
	for _, n := range nodes {
		if !n.Witness {
			out = append(out, n)
		}
	}
	return out
}

// IDs returns every node's ID.
func (c *Cluster) IDs() []uint64 {
	out := make([]uint64, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.ID
	}
	return out
}

// logTail returns the last lines of a node's log, for error messages.
func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
