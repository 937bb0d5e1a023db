package replica

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvd-project/kvd/internal/command"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/raftlog"
	"github.com/kvd-project/kvd/internal/transport"
)

// TestInteraction runs the scripts in testdata/interaction_*.txt: replicas
// whose clock the script turns by hand (Config.Ticks), over the in-memory
// transport, with golden output. Only the script's ticks move time, and
// after every command the test waits until the group has settled (no
// message in flight, every Ready loop idle), so a script's output is the
// same on every run however slow the machine.
//
// A script is a list of blocks: a command line, "----", and the output
// expected, up to a blank line. Lines starting with # outside a block are
// comments. Commands:
//
//	start voters=1,2,3      build and start a replica per voter
//	  witnesses=3           … of which these are witnesses
//	transfer id=1 to=3      ask node 1 to hand leadership to 3 (0: the
//	                        best successor); prints a refusal
//	tick id=1 n=20          n ticks of node 1's clock, settling after each
//	propose id=1 data=x     propose x at node 1
//	partition 1,2 3         messages cross no group boundary (a node in
//	                        no group is isolated)
//	heal                    remove the partition
//	status                  every node's role, term, leader, commit, applied
//	log                     what every node's state machine applied
//
// KVD_REWRITE_TESTDATA=1 rewrites the expected output from the actual.
//
// What a fuller language (etcd-io/raft's interaction_test.go) would add:
// message-level steps (deliver or drop each message by hand, printing
// them), crash and restart over the same in-memory file system, and
// configuration changes; each needs the transport to hold messages until
// told to deliver them instead of delivering them on its own goroutines.
func TestInteraction(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "interaction_*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file)
		})
	}
}

// scriptBlock is one command of a script and the output it expects.
type scriptBlock struct {
	line     int
	cmd      string
	expected string
	// from, to: the expected output's lines, lines[from:to] of the file.
	from, to int
}

func parseScript(t *testing.T, text string) []scriptBlock {
	t.Helper()
	lines := strings.Split(text, "\n")
	var out []scriptBlock
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		b := scriptBlock{line: i + 1, cmd: l}
		i++
		require.True(t, i < len(lines) && strings.TrimSpace(lines[i]) == "----", "line %d: %q is not followed by ----", b.line, l)
		i++
		b.from = i
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			i++
		}
		b.to = i
		b.expected = strings.Join(lines[b.from:b.to], "\n")
		out = append(out, b)
	}
	return out
}

func runScript(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	blocks := parseScript(t, string(b))
	env := newInteractionEnv(t)
	rewrite := os.Getenv("KVD_REWRITE_TESTDATA") == "1"
	got := make([]string, len(blocks))
	for i, blk := range blocks {
		got[i] = strings.TrimRight(env.run(blk.cmd), "\n")
		if !rewrite {
			require.Equal(t, blk.expected, got[i], "%s:%d: %s", file, blk.line, blk.cmd)
		}
	}
	if rewrite {
		// The expected outputs replaced, last first, comments kept.
		lines := strings.Split(string(b), "\n")
		for i := len(blocks) - 1; i >= 0; i-- {
			var repl []string
			if got[i] != "" {
				repl = strings.Split(got[i], "\n")
			}
			lines = slices.Replace(lines, blocks[i].from, blocks[i].to, repl...)
		}
		require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644))
	}
}

// interactionEnv is a group of replicas on one in-memory network.
type interactionEnv struct {
	t     *testing.T
	net   *transport.MemNetwork
	ids   []NodeID
	nodes map[NodeID]*scriptNode
	// witnesses are the members started as witnesses (start witnesses=…).
	witnesses map[NodeID]bool
	next      uint64 // request IDs

	mu    sync.Mutex
	group map[uint64]int // partition: node → group; nil when healed
	// Every message a replica sends is either dropped by the partition or
	// handed to the network and counted sent; delivered counts those the
	// network has stepped into a replica. Equal: nothing in flight.
	sent, delivered atomic.Int64
}

type scriptNode struct {
	r     *Replica
	ticks chan time.Time
	sm    *scriptSM
}

func newInteractionEnv(t *testing.T) *interactionEnv {
	env := &interactionEnv{t: t, net: transport.NewMemNetwork(), nodes: map[NodeID]*scriptNode{}}
	t.Cleanup(env.net.Close)
	return env
}

func (e *interactionEnv) run(cmd string) string {
	t := e.t
	fields := strings.Fields(cmd)
	args := map[string]string{}
	var pos []string
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			args[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	num := func(k string) uint64 {
		v, err := strconv.ParseUint(args[k], 10, 64)
		require.NoError(t, err, "%s: argument %s", cmd, k)
		return v
	}
	switch fields[0] {
	case "start":
		for _, s := range strings.Split(args["voters"], ",") {
			id, err := strconv.ParseUint(s, 10, 64)
			require.NoError(t, err, cmd)
			e.ids = append(e.ids, NodeID(id))
		}
		e.witnesses = map[NodeID]bool{}
		for _, s := range strings.Split(args["witnesses"], ",") {
			if s == "" {
				continue
			}
			id, err := strconv.ParseUint(s, 10, 64)
			require.NoError(t, err, cmd)
			e.witnesses[NodeID(id)] = true
		}
		for _, id := range e.ids {
			e.start(id)
		}
	case "transfer":
		n := e.node(NodeID(num("id")))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// Ticks are the script's: a transfer that raft takes cannot end
		// before the script ticks, so only its refusal is awaited.
		errc := make(chan error, 1)
		go func() { _, err := n.r.TransferLeadership(ctx, NodeID(num("to"))); errc <- err }()
		select {
		case err := <-errc:
			if err != nil {
				return "error: " + err.Error()
			}
		case <-time.After(100 * time.Millisecond):
		}
	case "tick":
		n := e.node(NodeID(num("id")))
		for range num("n") {
			n.ticks <- time.Time{}
			e.settle()
		}
		return "ok"
	case "propose":
		n := e.node(NodeID(num("id")))
		e.next++
		data := binary.BigEndian.AppendUint64(nil, e.next)
		data = append(data, args["data"]...)
		if _, err := n.r.Propose(context.Background(), time.Time{}, e.next, data); err != nil {
			return "error: " + err.Error()
		}
	case "partition":
		e.mu.Lock()
		e.group = map[uint64]int{}
		for i, g := range pos {
			for _, s := range strings.Split(g, ",") {
				id, err := strconv.ParseUint(s, 10, 64)
				require.NoError(t, err, cmd)
				e.group[id] = i
			}
		}
		e.mu.Unlock()
	case "heal":
		e.mu.Lock()
		e.group = nil
		e.mu.Unlock()
	case "status":
		e.settle()
		var b strings.Builder
		for _, id := range e.ids {
			st := e.nodes[id].r.Status()
			fmt.Fprintf(&b, "%d: %s term=%d leader=%d commit=%d applied=%d ready=%t\n",
				id, st.Role, st.Term, st.Leader, st.Commit, st.Applied, st.Ready)
		}
		return b.String()
	case "log":
		e.settle()
		var b strings.Builder
		for _, id := range e.ids {
			fmt.Fprintf(&b, "%d: %s\n", id, strings.Join(e.nodes[id].sm.values(), " "))
		}
		return b.String()
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	e.settle()
	return "ok"
}

func (e *interactionEnv) node(id NodeID) *scriptNode {
	n, ok := e.nodes[id]
	require.True(e.t, ok, "no node %d", id)
	return n
}

func (e *interactionEnv) start(id NodeID) {
	t := e.t
	l, err := raftlog.Open("raft", nil, raftlog.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	n := &scriptNode{ticks: make(chan time.Time), sm: &scriptSM{}}
	cfg := Config{ID: id, Peers: e.ids, ElectionTicks: 10, HeartbeatTicks: 1, Ticks: n.ticks,
		Witness: e.witnesses[id], IsWitness: func(id NodeID) bool { return e.witnesses[id] }}
	n.r, err = New(cfg, l, n.sm, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	tr := e.net.Transport(uint64(id), countingHandler{Handler: n.r, delivered: &e.delivered})
	require.NoError(t, n.r.Start(&scriptSender{env: e, from: uint64(id), tr: tr}))
	e.nodes[id] = n
	t.Cleanup(func() {
		n.r.Stop()
		require.NoError(t, tr.Close())
		require.NoError(t, l.Close())
	})
}

// settle waits until no message is in flight and every Ready loop is idle,
// twice in a row with nothing sent or delivered in between.
func (e *interactionEnv) settle() {
	deadline := time.Now().Add(10 * time.Second)
	var last [2]int64
	quiet := 0
	for quiet < 2 {
		require.True(e.t, time.Now().Before(deadline), "the group did not settle")
		idle := true
		for _, id := range e.ids {
			if !e.nodes[id].r.idle() {
				idle = false
			}
		}
		now := [2]int64{e.sent.Load(), e.delivered.Load()}
		switch {
		case idle && now[0] == now[1] && now == last:
			quiet++
		case idle && now[0] == now[1]:
			quiet = 1
		default:
			quiet = 0
			time.Sleep(time.Millisecond) // let the network's goroutines run
		}
		last = now
	}
}

// idle reports, from the Ready loop, whether it has nothing queued and no
// Ready to handle. Asking wakes the loop, which then handles a Ready that
// publishStatus left behind (a readiness probe).
func (r *Replica) idle() bool {
	res := make(chan bool, 1)
	select {
	case r.adminc <- func() {
		res <- len(r.recvc) == 0 && len(r.propc) == 0 && len(r.reportc) == 0 && len(r.batch) == 0 && !r.rn.HasReady()
	}:
		return <-res
	case <-r.done:
		return true
	}
}

// scriptSender drops what the partition forbids and counts the rest.
type scriptSender struct {
	env  *interactionEnv
	from uint64
	tr   *transport.MemTransport
}

func (s *scriptSender) Send(msgs []*pb.Message) {
	s.env.mu.Lock()
	group := s.env.group
	s.env.mu.Unlock()
	for _, m := range msgs {
		if group != nil {
			gf, okf := group[s.from]
			gt, okt := group[m.GetTo()]
			if !okf || !okt || gf != gt {
				continue
			}
		}
		s.env.sent.Add(1)
		s.tr.Send([]*pb.Message{m})
	}
}

// countingHandler counts the messages the network steps into a replica.
type countingHandler struct {
	transport.Handler
	delivered *atomic.Int64
}

func (h countingHandler) Step(ctx context.Context, m *pb.Message) error {
	err := h.Handler.Step(ctx, m)
	h.delivered.Add(1)
	return err
}

// scriptSM records the data of every proposal it applies, and answers its
// proposer with the entry's index.
type scriptSM struct {
	mu      sync.Mutex
	applied uint64
	data    []string
}

func (s *scriptSM) Apply(ents []Entry) ([]command.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []command.Result
	for _, e := range ents {
		if e.Index <= s.applied {
			continue
		}
		s.applied = e.Index
		if len(e.Data) >= 8 {
			s.data = append(s.data, string(e.Data[8:]))
			out = append(out, command.Result{ReqID: binary.BigEndian.Uint64(e.Data), Status: command.StatusValue, Value: e.Index})
		}
	}
	return out, nil
}

func (s *scriptSM) values() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.data)
}

func (s *scriptSM) AppliedIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied
}

func (s *scriptSM) Sync() (uint64, error)                { return s.AppliedIndex(), nil }
func (s *scriptSM) InstallSnapshot([]byte, uint64) error { return fmt.Errorf("scriptSM: no snapshots") }
