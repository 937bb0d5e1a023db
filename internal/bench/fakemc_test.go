package bench

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeMC is a tiny in-process memcached (get, set, version, stats) with
// fault knobs, so the client's failure handling can be tested without a
// real server. It is test-only.
type fakeMC struct {
	ln   net.Listener
	mu   sync.Mutex
	data map[string][]byte

	// setReply, when set, answers sets with this line (after reading the
	// data block, as memcached does).
	setReply string
	// failSets answers sets number (from, to] (counted over all
	// connections) with SERVER_ERROR after failDelay.
	failSetsFrom, failSetsTo int64
	failDelay                time.Duration
	// closeEvery closes a connection after that many requests on it.
	closeEvery int
	// corrupt flips a byte of every value returned.
	corrupt bool

	sets  atomic.Int64
	conns sync.WaitGroup
	open  map[net.Conn]bool
}

func startFakeMC(t *testing.T, configure func(*fakeMC)) *fakeMC {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMC{ln: ln, data: map[string][]byte{}, open: map[net.Conn]bool{}}
	if configure != nil {
		configure(f)
	}
	f.conns.Add(1)
	go f.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		f.mu.Lock()
		for c := range f.open {
			_ = c.Close()
		}
		f.mu.Unlock()
		f.conns.Wait()
	})
	return f
}

func (f *fakeMC) addr() string { return f.ln.Addr().String() }

func (f *fakeMC) accept() {
	defer f.conns.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.open[c] = true
		f.mu.Unlock()
		f.conns.Add(1)
		go f.serve(c)
	}
}

func (f *fakeMC) serve(c net.Conn) {
	defer f.conns.Done()
	defer func() {
		f.mu.Lock()
		delete(f.open, c)
		f.mu.Unlock()
		_ = c.Close()
	}()
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	for n := 1; ; n++ {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if f.closeEvery > 0 && n%f.closeEvery == 0 {
			_ = w.Flush()
			return
		}
		fields := bytes.Fields([]byte(line))
		if len(fields) == 0 {
			w.WriteString("ERROR\r\n")
			continue
		}
		switch string(fields[0]) {
		case "get":
			f.mu.Lock()
			v, ok := f.data[string(fields[1])]
			f.mu.Unlock()
			if ok {
				if f.corrupt {
					v = append([]byte(nil), v...)
					v[len(v)-1] ^= 1
				}
				w.WriteString("VALUE " + string(fields[1]) + " 0 " + strconv.Itoa(len(v)) + "\r\n")
				w.Write(v)
				w.WriteString("\r\n")
			}
			w.WriteString("END\r\n")
		case "set":
			size, _ := strconv.Atoi(string(fields[4]))
			buf := make([]byte, size+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return
			}
			k := f.sets.Add(1)
			switch {
			case f.setReply != "":
				w.WriteString(f.setReply + "\r\n")
			case k > f.failSetsFrom && k <= f.failSetsTo:
				time.Sleep(f.failDelay)
				w.WriteString("SERVER_ERROR temporarily failing\r\n")
			default:
				f.mu.Lock()
				f.data[string(fields[1])] = buf[:size]
				f.mu.Unlock()
				w.WriteString("STORED\r\n")
			}
		case "version":
			w.WriteString("VERSION fake-1.0\r\n")
		case "stats":
			f.mu.Lock()
			items := len(f.data)
			f.mu.Unlock()
			w.WriteString("STAT curr_items " + strconv.Itoa(items) + "\r\nEND\r\n")
		default:
			w.WriteString("ERROR\r\n")
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}
