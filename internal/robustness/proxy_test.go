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
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
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
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(testHello(1, 2)); err != nil {
		t.Fatal(err)
	}
	// The echoed hello proves the link is established.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, helloSize)); err != nil {
		t.Fatal(err)
	}
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
