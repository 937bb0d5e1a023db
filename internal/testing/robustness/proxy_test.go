package robustness

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

func testHello(from, to uint64) []byte {
	b := make([]byte, helloSize)
	copy(b, "kvdP")
	binary.BigEndian.PutUint64(b[16:], from)
	binary.BigEndian.PutUint64(b[24:], to)
	return b
}

// echoServer stands in for a node's peer listener: it echoes everything.
func echoServer(t *testing.T) string {
	return serveLoopback(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// serveLoopback listens on a loopback port until the test ends and runs
// handle on each connection it accepts, closing the connection after.
func serveLoopback(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip dials the proxy as node from, sends the hello and a payload,
// and reads the echo back.
func roundTrip(addr string, from, to uint64) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	start := time.Now()
	msg := append(testHello(from, to), "ping"...)
	if _, err := c.Write(msg); err != nil {
		return 0, err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func TestNetworkCutDelayHeal(t *testing.T) {
	n := NewNetwork()
	t.Cleanup(func() { _ = n.Close() })
	addr, err := n.AddProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(addr, 1, 2); err != nil {
		t.Fatalf("healthy network: %v", err)
	}

	// A connection open before the cut is closed by it.
	c := establish(t, addr, 1, 2)
	n.Cut(1, 2)
	if _, err := io.ReadFull(c, make([]byte, 1)); err == nil {
		t.Fatal("an existing connection of a cut pair survived")
	}
	if _, err := roundTrip(addr, 1, 2); err == nil {
		t.Fatal("a cut pair connected")
	}
	if _, err := roundTrip(addr, 3, 2); err != nil {
		t.Fatalf("another pair is affected by the cut: %v", err)
	}

	n.Heal()
	n.SetDelay(100 * time.Millisecond)
	took, err := roundTrip(addr, 1, 2)
	if err != nil {
		t.Fatalf("after healing: %v", err)
	}
	if took < 100*time.Millisecond {
		t.Fatalf("delay not applied: round trip %s", took)
	}
}

// TestNetworkReportsEffect: Heal says what the faults did, so that a fault
// that touched no connection (nodes that bypass the proxies, a hello the
// proxy misreads) fails its run instead of passing it vacuously.
func TestNetworkReportsEffect(t *testing.T) {
	n := NewNetwork()
	t.Cleanup(func() { _ = n.Close() })
	addr, err := n.AddProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}

	// No traffic at all: the cut and the delay did nothing.
	n.Cut(1, 2)
	n.SetDelay(10 * time.Millisecond)
	if eff := n.Heal(); eff != (Effect{}) {
		t.Fatalf("effect without traffic: %+v", eff)
	}
	if err := checkEffect(Effect{}, false); err == nil {
		t.Fatal("a cut that touched nothing passed")
	}

	// Traffic of another pair is not the cut's doing.
	n.Cut(1, 2)
	if _, err := roundTrip(addr, 3, 2); err != nil {
		t.Fatal(err)
	}
	if eff := n.Heal(); eff.Cut != 0 {
		t.Fatalf("cut counted another pair's traffic: %+v", eff)
	}

	// A live link closed by the cut, then a dial refused.
	establish(t, addr, 1, 2)
	n.Cut(1, 2)
	if _, err := roundTrip(addr, 1, 2); err == nil {
		t.Fatal("a cut pair connected")
	}
	eff := n.Heal()
	if eff.Cut != 2 {
		t.Fatalf("cut effect %+v, want 2 (one closed, one refused)", eff)
	}
	if err := checkEffect(eff, false); err != nil {
		t.Fatal(err)
	}

	// A delay that held traffic back.
	n.SetDelay(10 * time.Millisecond)
	if _, err := roundTrip(addr, 1, 2); err != nil {
		t.Fatal(err)
	}
	eff = n.Heal()
	if eff.Delayed == 0 {
		t.Fatalf("delay effect %+v, want chunks delayed", eff)
	}
	if err := checkEffect(eff, true); err != nil {
		t.Fatal(err)
	}
	if err := checkEffect(Effect{Cut: 3}, true); err == nil {
		t.Fatal("a delay that held nothing back passed")
	}
}

// establish opens a link from peer `from` to peer `to` through the proxy at
// addr and waits for its hello to come back: the link is then established.
// It is closed at the test's end.
func establish(t *testing.T, addr string, from, to uint64) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write(testHello(from, to)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, helloSize)); err != nil {
		t.Fatal(err)
	}
	return c
}
