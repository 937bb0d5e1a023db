package robustness

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// helloSize is the length of the hello a kvd peer dialer sends first
// (internal/transport, wire format version 1): magic, version, flags,
// cluster ID, then the sender's and the addressee's node IDs.
const helloSize = 32

// pair is one direction of peer traffic: messages sent by From to To.
type pair struct{ From, To uint64 }

// Network is the set of peer proxies of one cluster and the faults applied
// to them. Its methods may be called from any goroutine.
type Network struct {
	mu      sync.Mutex
	cut     map[pair]bool
	delay   time.Duration
	links   map[*link]struct{}
	proxies []*proxy
	wg      sync.WaitGroup
	closed  bool
	// effect is what the faults did since the last Heal.
	effect Effect
	// sec: peer traffic is TLS, which each proxy terminates and
	// re-establishes as the members (see Security); nil: raw bytes.
	sec *Security
}

// Effect counts what the network faults did between two heals: peer
// connections a cut closed or refused, and chunks a delay held back. A
// fault that did nothing (nodes that dial each other without the proxies,
// a hello the proxy misreads) would make its run pass vacuously.
type Effect struct{ Cut, Delayed int }

// checkEffect fails unless the fault in force did something: a delay
// (delay true) held traffic back, or a cut closed or refused a connection.
func checkEffect(eff Effect, delay bool) error {
	if delay && eff.Delayed == 0 {
		return fmt.Errorf("the delay held back no peer traffic (%+v): the fault had no effect", eff)
	}
	if !delay && eff.Cut == 0 {
		return fmt.Errorf("the cut closed or refused no peer connection (%+v): the fault had no effect", eff)
	}
	return nil
}

// NewNetwork returns an empty network; AddProxy puts a proxy in front of
// each node.
func NewNetwork() *Network {
	return &Network{cut: map[pair]bool{}, links: map[*link]struct{}{}}
}

type proxy struct {
	ln     net.Listener
	target string
	member string // the node behind it, for a secured network
}

// link is one proxied peer connection: the dialer's side and ours to the
// node behind the proxy.
type link struct {
	p         pair
	down, up  net.Conn
	closeOnce sync.Once
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		_ = l.down.Close()
		_ = l.up.Close()
	})
}

// AddProxy listens on a fresh loopback port and forwards every connection
// to target (a node's real --peer-addr). It returns the proxy's address,
// which goes into --initial-cluster.
func (n *Network) AddProxy(target string) (string, error) { return n.addProxy("", target) }

// addProxy is AddProxy for member's listener: a secured network needs the
// name to answer TLS as member.
func (n *Network) addProxy(member, target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("proxy for %s: %w", target, err)
	}
	p := &proxy{ln: ln, target: target, member: member}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	n.wg.Add(1)
	go n.accept(p)
	return ln.Addr().String(), nil
}

func (n *Network) accept(p *proxy) {
	defer n.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		n.wg.Add(1)
		go n.serve(p, c)
	}
}

// serve reads the hello to learn which ordered pair the connection carries,
// refuses it when that pair is cut, and otherwise relays it.
func (n *Network) serve(p *proxy, down net.Conn) {
	defer n.wg.Done()
	var hello [helloSize]byte
	var dialer string // the dialing member, on a secured network
	_ = down.SetDeadline(time.Now().Add(5 * time.Second))
	if n.sec != nil {
		tc, name, err := n.sec.acceptPeer(down, p.member)
		if err != nil {
			_ = down.Close()
			return
		}
		down, dialer = tc, name
	}
	if _, err := io.ReadFull(down, hello[:]); err != nil {
		_ = down.Close()
		return
	}
	_ = down.SetDeadline(time.Time{})
	pr := pair{From: binary.BigEndian.Uint64(hello[16:24]), To: binary.BigEndian.Uint64(hello[24:32])}
	if n.refuse(pr) {
		_ = down.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		_ = down.Close()
		return
	}
	if n.sec != nil {
		_ = up.SetDeadline(time.Now().Add(5 * time.Second))
		tc, err := n.sec.dialPeer(up, dialer, p.member)
		if err != nil {
			_ = down.Close()
			_ = up.Close()
			return
		}
		_ = up.SetDeadline(time.Time{})
		up = tc
	}
	if _, err := up.Write(hello[:]); err != nil {
		_ = down.Close()
		_ = up.Close()
		return
	}
	l := &link{p: pr, down: down, up: up}
	n.mu.Lock()
	if n.closed || n.cut[pr] {
		if !n.closed {
			n.effect.Cut++
		}
		n.mu.Unlock()
		l.close()
		return
	}
	n.links[l] = struct{}{}
	n.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.forward(l) }()
	go func() {
		// The acceptor's answer (the handshake response) flows back
		// undelayed: faults act on the messages, which flow forward.
		defer wg.Done()
		_, _ = io.Copy(down, up)
		l.close()
	}()
	wg.Wait()
	n.mu.Lock()
	delete(n.links, l)
	n.mu.Unlock()
}

type chunk struct {
	b   []byte
	due time.Time
}

// forward copies dialer→node, holding each chunk back by the delay in force
// when it was read. A bounded queue keeps TCP backpressure intact.
func (n *Network) forward(l *link) {
	defer l.close()
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := l.up.Write(c.b); err != nil {
				l.close()
				for range q {
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		k, err := l.down.Read(buf)
		if k > 0 {
			b := append([]byte(nil), buf[:k]...)
			q <- chunk{b: b, due: time.Now().Add(n.delayChunk())}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// refuse reports whether a new connection of pair p must be refused, and
// counts a refusal due to a cut.
func (n *Network) refuse(p pair) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return true
	}
	if n.cut[p] {
		n.effect.Cut++
		return true
	}
	return false
}

// delayChunk is the delay in force for one chunk, counted when non-zero.
func (n *Network) delayChunk() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.delay > 0 {
		n.effect.Delayed++
	}
	return n.delay
}

// Cut stops traffic from one node to another: their connections are closed
// and new ones refused until Heal.
func (n *Network) Cut(from, to uint64) {
	n.mu.Lock()
	n.cut[pair{from, to}] = true
	var victims []*link
	for l := range n.links {
		if l.p == (pair{from, to}) {
			victims = append(victims, l)
		}
	}
	n.effect.Cut += len(victims)
	n.mu.Unlock()
	for _, l := range victims {
		l.close()
	}
}

// Isolate cuts id off from every node in others, both ways.
func (n *Network) Isolate(id uint64, others []uint64) {
	for _, o := range others {
		if o != id {
			n.Cut(id, o)
			n.Cut(o, id)
		}
	}
}

// SetDelay holds back every forwarded chunk by d (0: none).
func (n *Network) SetDelay(d time.Duration) {
	n.mu.Lock()
	n.delay = d
	n.mu.Unlock()
}

// Delay is the latency in force.
func (n *Network) Delay() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.delay
}

// ResetAll closes every established peer connection; the nodes redial.
func (n *Network) ResetAll() int {
	n.mu.Lock()
	victims := make([]*link, 0, len(n.links))
	for l := range n.links {
		victims = append(victims, l)
	}
	n.mu.Unlock()
	for _, l := range victims {
		l.close()
	}
	return len(victims)
}

// Heal lifts every cut and the delay, and returns what they did.
func (n *Network) Heal() Effect {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[pair]bool{}
	n.delay = 0
	eff := n.effect
	n.effect = Effect{}
	return eff
}

// Close stops the proxies and closes every connection.
func (n *Network) Close() error {
	n.mu.Lock()
	n.closed = true
	proxies := n.proxies
	n.mu.Unlock()
	var errs []error
	for _, p := range proxies {
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	n.ResetAll()
	n.wg.Wait()
	return errors.Join(errs...)
}
