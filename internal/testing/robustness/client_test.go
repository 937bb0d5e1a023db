package robustness

import (
	"bufio"
	"errors"
	"net"
	"testing"
	"time"
)

// fakeMC answers every request line on one connection with reply,
// whatever it was (a value block for a store is read and ignored).
func fakeMC(t *testing.T, reply string) string {
	return serveLoopback(t, func(c net.Conn) {
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			return
		}
		_, _ = c.Write([]byte(reply))
		time.Sleep(100 * time.Millisecond)
	})
}

// TestClientFlagsProtocolViolations: a reply no memcached would send is a
// server bug, not a failed read to drop silently: the history counts it
// (and Run fails on it), while a SERVER_ERROR stays an ordinary failure.
func TestClientFlagsProtocolViolations(t *testing.T) {
	tests := []struct {
		name     string
		in       Input
		reply    string
		protocol bool
	}{
		{"well-formed get", Input{Op: OpGet}, "VALUE k 0 1\r\nx\r\nEND\r\n", false},
		{"server error on get", Input{Op: OpGet}, "SERVER_ERROR timeout\r\n", false},
		{"server error on set", Input{Op: OpSet, Value: "x"}, "SERVER_ERROR timeout\r\n", false},
		{"wrong key", Input{Op: OpGet}, "VALUE other 0 1\r\nx\r\nEND\r\n", true},
		{"flags never written", Input{Op: OpGet}, "VALUE k 7 1\r\nx\r\nEND\r\n", true},
		{"cas on a plain get", Input{Op: OpGet}, "VALUE k 0 1 5\r\nx\r\nEND\r\n", true},
		{"no cas on gets", Input{Op: OpGets}, "VALUE k 0 1\r\nx\r\nEND\r\n", true},
		{"bad data terminator", Input{Op: OpGet}, "VALUE k 0 1\r\nxy\nEND\r\n", true},
		{"no END", Input{Op: OpGet}, "VALUE k 0 1\r\nx\r\nVALUE k 0 1\r\nx\r\nEND\r\n", true},
		{"garbage to a set", Input{Op: OpSet, Value: "x"}, "STORD\r\n", true},
		{"client error to a delete", Input{Op: OpDelete}, "CLIENT_ERROR bad command line format\r\n", true},
		{"garbage to an incr", Input{Op: OpIncr, Delta: 1}, "12x\r\n", true},
		// ERROR is memcached's reply to a command it does not know: to the
		// workload's well-formed requests it means kvd misparsed one (a
		// framing bug), and the request did not run.
		{"unknown-command error to a set", Input{Op: OpSet, Value: "x"}, "ERROR\r\n", true},
		{"unknown-command error to a gets", Input{Op: OpGets}, "ERROR\r\n", true},
		{"unknown-command error to a cas", Input{Op: OpCAS, Value: "x", Token: 3}, "ERROR\r\n", true},
		// …while memcached's (and kvd's) refusal of a connection over the
		// limit is a server condition, like SERVER_ERROR.
		{"too many connections", Input{Op: OpSet, Value: "x"}, "ERROR Too many open connections\r\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory()
			n := &Node{Name: "fake", MemcacheAddr: fakeMC(t, tc.reply)}
			c := newClient(0, n, []*Node{n}, 2*time.Second, 1, h)
			defer c.close()
			_, err := c.do(n, "k", tc.in)
			if got := errors.Is(err, errProtocol); got != tc.protocol {
				t.Fatalf("error %v: protocol violation %v, want %v", err, got, tc.protocol)
			}
			if got := h.Stats().Protocol; got != btoi(tc.protocol) {
				t.Fatalf("history counts %d protocol violations, want %d", got, btoi(tc.protocol))
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestClientFlagsUnsolicitedReplies: the client never pipelines, so bytes
// waiting before it sends a request answer nothing it asked: a server that
// replies twice to one request would otherwise have its extra reply taken
// for the next request's, which the history would record as definite.
func TestClientFlagsUnsolicitedReplies(t *testing.T) {
	h := newHistory()
	n := &Node{Name: "fake", MemcacheAddr: fakeMC(t, "STORED\r\nSTORED\r\n")}
	c := newClient(0, n, []*Node{n}, 2*time.Second, 1, h)
	defer c.close()
	if _, err := c.do(n, "k", Input{Op: OpSet, Value: "a"}); err != nil {
		t.Fatalf("first set: %v", err)
	}
	out, err := c.do(n, "k", Input{Op: OpSet, Value: "b"})
	if !errors.Is(err, errProtocol) {
		t.Fatalf("second set got %+v, %v; want a protocol violation", out, err)
	}
	if got := h.Stats(); got.Protocol != 1 || got.Unknown != 1 {
		t.Fatalf("history %+v, want one protocol violation and one unknown write", got)
	}
}
