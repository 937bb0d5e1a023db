package migrate_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memcachedBin is the reference server the tests copy from.
const memcachedBin = "/usr/bin/memcached"

// memcachedProc is one memcached this test started.
type memcachedProc struct {
	Addr string
	cmd  *exec.Cmd
	once sync.Once
}

// Kill stops this process (by its PID), once.
func (m *memcachedProc) Kill() {
	m.once.Do(func() {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
	})
}

// startMemcached starts memcached on a free loopback port, TCP only, and
// kills it at cleanup. It skips when memcached is missing, unless
// KVD_REQUIRE_REFERENCE is set (as under .ci/run, which installs it).
func startMemcached(t *testing.T, extra ...string) *memcachedProc {
	t.Helper()
	if _, err := os.Stat(memcachedBin); err != nil {
		if os.Getenv("KVD_REQUIRE_REFERENCE") != "" {
			t.Fatalf("%s is missing (%v); .ci/run installs Debian's memcached", memcachedBin, err)
		}
		t.Skipf("%s is missing (Debian: apt-get install memcached): %v", memcachedBin, err)
	}
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		require.NoError(t, l.Close())
		args := append([]string{"-l", "127.0.0.1", "-p", port, "-U", "0"}, extra...)
		if os.Geteuid() == 0 {
			args = append(args, "-u", "root") // memcached refuses root without -u
		}
		m := &memcachedProc{Addr: "127.0.0.1:" + port, cmd: exec.Command(memcachedBin, args...)}
		require.NoError(t, m.cmd.Start())
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if c, err := net.Dial("tcp", m.Addr); err == nil {
				_ = c.Close()
				t.Cleanup(m.Kill)
				return m
			}
			time.Sleep(20 * time.Millisecond)
		}
		m.Kill()
		t.Logf("memcached did not listen on %s (attempt %d)", m.Addr, attempt+1)
	}
	t.Fatal("could not start memcached")
	return nil
}

// want is one item a test loaded and expects back.
type want struct {
	value   []byte
	flags   uint32
	ttl     int // seconds, relative; 0 never
	expires time.Time
}

// dataset makes n items: sizes mostly small with a long tail up to
// 100 KB, random flags, and TTLs: none, long, or a few seconds (short).
func dataset(seed uint64, n int, short float64) map[string]want {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make(map[string]want, n)
	for i := range n {
		var size int
		switch p := rng.Float64(); {
		case p < 0.90:
			size = 10 + rng.IntN(990)
		case p < 0.99:
			size = 1000 + rng.IntN(9000)
		default:
			size = 10000 + rng.IntN(90001)
		}
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(rng.UintN(256))
		}
		w := want{value: v, flags: rng.Uint32()}
		switch p := rng.Float64(); {
		case p < short:
			w.ttl = 3
		case p < 0.5:
			w.ttl = 3600
		}
		out[fmt.Sprintf("item:%06d:%x", i, rng.Uint32())] = w
	}
	return out
}

// load writes items to a memcached (or kvd) with pipelined sets, 500 to a
// round trip, and stamps each with its expiry.
func load(t *testing.T, addr string, items map[string]want) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	r, w := bufio.NewReader(c), bufio.NewWriterSize(c, 1<<20)
	keys := make([]string, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		now := time.Now()
		for _, k := range keys[:n] {
			it := items[k]
			fmt.Fprintf(w, "set %s %d %d %d\r\n", k, it.flags, it.ttl, len(it.value))
			w.Write(it.value)
			w.WriteString("\r\n")
			if it.ttl != 0 {
				it.expires = now.Add(time.Duration(it.ttl) * time.Second)
				items[k] = it
			}
		}
		require.NoError(t, w.Flush())
		for range n {
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "STORED\r\n", line)
		}
		keys = keys[n:]
	}
}

// got is what a server holds for a key.
type got struct {
	found bool
	value []byte
	flags uint32
	ttl   int64 // -1 never
}

// readAll reads every key from addr with pipelined `mg <key> v f t`.
func readAll(t *testing.T, addr string, keys []string) map[string]got {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	r, w := bufio.NewReaderSize(c, 1<<20), bufio.NewWriter(c)
	out := make(map[string]got, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), 200)
		for _, k := range keys[:n] {
			fmt.Fprintf(w, "mg %s v f t\r\n", k)
		}
		require.NoError(t, w.Flush())
		for _, k := range keys[:n] {
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			f := strings.Fields(line)
			if f[0] == "EN" {
				out[k] = got{}
				continue
			}
			require.Equal(t, "VA", f[0], line)
			size, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			g := got{found: true}
			for _, fl := range f[2:] {
				n, err := strconv.ParseInt(fl[1:], 10, 64)
				require.NoError(t, err, line)
				switch fl[0] {
				case 'f':
					g.flags = uint32(n)
				case 't':
					g.ttl = n
				}
			}
			g.value = make([]byte, size+2)
			_, err = io.ReadFull(r, g.value)
			require.NoError(t, err)
			g.value = g.value[:size]
			out[k] = g
		}
		keys = keys[n:]
	}
	return out
}

func keysOf(items map[string]want) []string {
	out := make([]string, 0, len(items))
	for k := range items {
		out = append(out, k)
	}
	return out
}
