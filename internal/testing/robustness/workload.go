package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Key classes: each class is exercised by the operations of one of the
// model's facets, so that every facet sees contention on a few keys.
var (
	registerKeys = []string{"reg0", "reg1", "reg2"}
	casKeys      = []string{"cas0", "cas1"}
	addRepKeys   = []string{"ar0", "ar1"}
	counterKeys  = []string{"ctr0", "ctr1"}
	finalKey     = "final"
)

// AllKeys lists every key the workload touches, the final write's included.
func AllKeys() []string {
	var out []string
	for _, ks := range [][]string{registerKeys, casKeys, addRepKeys, counterKeys, {finalKey}} {
		out = append(out, ks...)
	}
	return out
}

// client is one sequential memcache client: it waits for each reply (or
// its timeout) before the next request.
type client struct {
	id      int
	pinned  *Node // nil: pick a node at random for every operation
	nodes   []*Node
	timeout time.Duration
	rng     *rand.Rand
	h       *History
	conns   map[*Node]mcClient
	seq     int
	// proto is the protocol this client speaks, by its id, so that
	// histories mix the three on the same keys.
	proto protocol
}

// protocol is a memcache protocol a client speaks.
type protocol int

const (
	protoText   protocol = iota // mcConn
	protoBinary                 // binConn
	protoMeta                   // metaConn
)

// protocolOf assigns protocols by client id: id%3 == 0 text, 1 binary,
// 2 meta. The first clients are pinned one to a node, so in a 3-node run
// each node has a pinned client of each protocol.
func protocolOf(id int) protocol { return protocol(id % 3) }

func newClient(id int, pinned *Node, nodes []*Node, timeout time.Duration, seed uint64, h *History) *client {
	return &client{id: id, pinned: pinned, nodes: nodes, timeout: timeout,
		rng: rand.New(rand.NewPCG(seed, uint64(id))), h: h, conns: map[*Node]mcClient{}, proto: protocolOf(id)}
}

func (c *client) close() {
	for n, mc := range c.conns {
		_ = mc.Close()
		delete(c.conns, n)
	}
}

func (c *client) node() *Node {
	if c.pinned != nil {
		return c.pinned
	}
	return c.nodes[c.rng.IntN(len(c.nodes))]
}

// do runs one operation on node n and records it. Any error leaves the
// connection in an unknown state, so it is dropped.
func (c *client) do(n *Node, key string, in Input) (Output, error) {
	op := &Op{Client: c.id, Node: n.Name, Key: key, Input: in, Call: c.h.now()}
	out, err := c.exec(n, key, in)
	op.Return = c.h.now()
	op.Output = out
	c.h.record(op, err)
	if err != nil {
		if mc := c.conns[n]; mc != nil {
			_ = mc.Close()
			delete(c.conns, n)
		}
	}
	return out, err
}

// dial opens a connection in the client's protocol (over TLS and logged
// in, with sec).
func (c *client) dial(addr string, sec *Security) (mcClient, error) {
	switch c.proto {
	case protoBinary:
		return dialBinary(addr, c.timeout, sec)
	case protoMeta:
		return dialMeta(addr, c.timeout, c.rng.Uint64(), sec)
	}
	return dialMC(addr, c.timeout, sec)
}

func (c *client) exec(n *Node, key string, in Input) (Output, error) {
	mc := c.conns[n]
	if mc == nil {
		var err error
		if mc, err = c.dial(n.MemcacheAddr, n.sec); err != nil {
			return Output{}, err
		}
		c.conns[n] = mc
	}
	switch in.Op {
	case OpGet, OpGets:
		it, err := mc.get(key, in.Op == OpGets)
		if err != nil {
			return Output{}, err
		}
		if !it.Found {
			return Output{Status: "END"}, nil
		}
		return Output{Status: "VALUE", Value: it.Value, Token: it.CAS}, nil
	case OpSet, OpAdd, OpReplace, OpCAS:
		s, err := mc.store(in.Op, key, in.Value, in.Token)
		return Output{Status: s}, err
	case OpDelete:
		s, err := mc.delete(key)
		return Output{Status: s}, err
	case OpIncr, OpDecr:
		s, err := mc.arith(in.Op, key, in.Delta)
		return Output{Status: s}, err
	}
	return Output{}, fmt.Errorf("unknown operation %q", in.Op)
}

func (c *client) value() string {
	c.seq++
	return fmt.Sprintf("c%d-%d", c.id, c.seq)
}

// step issues one workload operation (two for a gets followed by cas).
func (c *client) step() error {
	r := c.rng.IntN(100)
	n := c.node()
	switch class := c.rng.IntN(4); class {
	case 0:
		k := registerKeys[c.rng.IntN(len(registerKeys))]
		switch {
		case r < 45:
			_, err := c.do(n, k, Input{Op: OpSet, Value: c.value()})
			return err
		case r < 90:
			_, err := c.do(n, k, Input{Op: OpGet})
			return err
		default:
			_, err := c.do(n, k, Input{Op: OpDelete})
			return err
		}
	case 1:
		k := casKeys[c.rng.IntN(len(casKeys))]
		if r < 15 {
			_, err := c.do(n, k, Input{Op: OpSet, Value: c.value()})
			return err
		}
		out, err := c.do(n, k, Input{Op: OpGets})
		if err != nil || out.Status != "VALUE" || r >= 85 {
			return err
		}
		// Read-modify-write: the cas goes to the same node so that a
		// stale read there shows up as a cas that should have failed.
		_, err = c.do(n, k, Input{Op: OpCAS, Value: c.value(), Token: out.Token})
		return err
	case 2:
		k := addRepKeys[c.rng.IntN(len(addRepKeys))]
		var in Input
		switch {
		case r < 30:
			in = Input{Op: OpAdd, Value: c.value()}
		case r < 60:
			in = Input{Op: OpReplace, Value: c.value()}
		case r < 90:
			in = Input{Op: OpGet}
		default:
			in = Input{Op: OpDelete}
		}
		_, err := c.do(n, k, in)
		return err
	default:
		k := counterKeys[c.rng.IntN(len(counterKeys))]
		var in Input
		switch {
		case r < 35:
			in = Input{Op: OpIncr, Delta: uint64(1 + c.rng.IntN(20))}
		case r < 60:
			in = Input{Op: OpDecr, Delta: uint64(1 + c.rng.IntN(20))}
		case r < 85:
			in = Input{Op: OpGet}
		case r < 95:
			in = Input{Op: OpAdd, Value: fmt.Sprint(100 + c.rng.IntN(900))}
		default:
			in = Input{Op: OpDelete}
		}
		_, err := c.do(n, k, in)
		return err
	}
}

// run issues operations until ctx ends. After a failure it backs off a
// little so that a dead node is not hammered with dials.
func (c *client) run(ctx context.Context) {
	defer c.close()
	for ctx.Err() == nil {
		if err := c.step(); err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(10+c.rng.IntN(40)) * time.Millisecond):
			}
		}
	}
}

// errGaveUp is returned when an operation that must succeed did not.
var errGaveUp = errors.New("gave up")

// mustSucceed repeats in on key, over every node in turn, until it gets a
// definite reply or within elapses. Every attempt is recorded.
func (c *client) mustSucceed(ctx context.Context, nodes []*Node, key string, in Input, within time.Duration) (Output, error) {
	deadline := time.Now().Add(within)
	var last error
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		out, err := c.do(nodes[i%len(nodes)], key, in)
		if err == nil {
			return out, nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return Output{}, fmt.Errorf("%w: %s %s within %s: %v", errGaveUp, in.Op, key, within, last)
}
