package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// acked is what a client was told is stored.
type acked struct {
	value []byte
	flags uint32
	cas   uint64 // 0 when the gets after the set did not complete
}

// writeLoad writes unique keys from many connections until stop is closed or
// a bounded count is reached, recording every acknowledged write and the CAS
// token a following gets returned.
func writeLoad(t *testing.T, addr string, workers, perWorker int, stop <-chan struct{}) map[string]acked {
	var mu sync.Mutex
	got := make(map[string]acked)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := mcClient(addr)
			c.Timeout = 5 * time.Second
			c.MaxIdleConns = 2
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perWorker {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-k%d", w, i)
				val := make([]byte, 16+rng.IntN(600))
				for j := range val {
					val[j] = byte('a' + rng.IntN(26))
				}
				it := &memcache.Item{Key: key, Value: val, Flags: rng.Uint32()}
				if err := c.Set(it); err != nil {
					continue // not acknowledged: may or may not be there
				}
				a := acked{value: val, flags: it.Flags}
				if g, err := c.Get(key); err == nil {
					a.cas = casOf(g)
				}
				mu.Lock()
				got[key] = a
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return got
}

// verify checks every acknowledged write is there with its exact value,
// flags and (where known) CAS token.
func verify(t *testing.T, addr string, want map[string]acked) {
	t.Helper()
	c := mcClient(addr)
	c.Timeout = 10 * time.Second
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	missing, casChecked := 0, 0
	for start := 0; start < len(keys); start += 100 {
		batch := keys[start:min(start+100, len(keys))]
		items, err := c.GetMulti(batch)
		require.NoError(t, err)
		for _, k := range batch {
			it, ok := items[k]
			if !ok {
				missing++
				t.Errorf("acknowledged key %s lost", k)
				continue
			}
			w := want[k]
			require.Equal(t, w.value, it.Value, "value of %s", k)
			require.Equal(t, w.flags, it.Flags, "flags of %s", k)
			if w.cas != 0 {
				require.Equal(t, w.cas, casOf(it), "cas of %s", k)
				casChecked++
			}
		}
	}
	require.Zero(t, missing, "%d of %d acknowledged writes lost", missing, len(want))
	require.NotZero(t, casChecked, "no CAS token was recorded, so none was checked")
	t.Logf("verified %d acknowledged writes (%d with their CAS token)", len(want), casChecked)
}

func TestKillNineLosesNoAcknowledgedWrite(t *testing.T) {
	dir := t.TempDir()
	p := kvdproc.Start(t, dir)
	stop := make(chan struct{})
	var result map[string]acked
	done := make(chan struct{})
	go func() {
		result = writeLoad(t, p.MemcacheAddr, 16, 4000, stop)
		close(done)
	}()
	// Kill once a few hundred writes are acknowledged (bounded wait).
	c := mcClient(p.MemcacheAddr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Get("w0-k50")
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "w0-k50 never acknowledged: %v", err)
		time.Sleep(10 * time.Millisecond)
	}
	// The point of the test: SIGKILL lands while writes are in flight. A
	// load that had already ended would test only a restart of an idle node.
	select {
	case <-done:
		t.Fatal("the write load ended before the kill: nothing was killed mid-write")
	default:
	}
	p.Kill()
	close(stop)
	<-done
	require.NotEmpty(t, result, "no write was acknowledged before the kill")
	t.Logf("%d writes acknowledged before SIGKILL", len(result))

	q := p.Restart()
	verify(t, q.MemcacheAddr, result)
}

func TestCleanRestartKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	p := kvdproc.Start(t, dir)
	result := writeLoad(t, p.MemcacheAddr, 4, 200, make(chan struct{}))
	require.Len(t, result, 800)
	p.Stop()
	q := p.Restart()
	verify(t, q.MemcacheAddr, result)

	// And the counters a monitoring tool reads agree with the data.
	c := mcClient(q.MemcacheAddr)
	require.NoError(t, c.Set(&memcache.Item{Key: "n", Value: []byte("41")}))
	n, err := c.Increment("n", 1)
	require.NoError(t, err)
	require.Equal(t, uint64(42), n)
}

// TestLogCompactionKeepsRestartCorrect writes more entries than the
// compaction interval, checks the log was truncated, and checks a restart
// after SIGKILL still finds everything (the log is truncated behind the
// synced state, never past it).
func TestLogCompactionKeepsRestartCorrect(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 20k entries")
	}
	dir := t.TempDir()
	p := kvdproc.Start(t, dir)
	var n atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := mcClient(p.MemcacheAddr)
			for i := range 2600 {
				if err := c.Set(&memcache.Item{Key: fmt.Sprintf("c%d", (w*2600+i)%500), Value: []byte(fmt.Sprint(w, i))}); err == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(8*2600), n.Load())
	c := mcClient(p.MemcacheAddr)
	require.NoError(t, c.Set(&memcache.Item{Key: "last", Value: []byte("v")}))
	// The point of the test: the log really was truncated before the kill.
	first := metricValue(t, p.HTTPAddr, "kvd_raft_log_first_index")
	require.Greater(t, first, 1.0, "no log compaction happened after %d writes", n.Load())
	t.Logf("raft log compacted to first index %.0f before SIGKILL", first)
	// Which worker's write of each key came last is the server's call:
	// what it serves now is what it must serve after the restart.
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("c%d", i)
	}
	before, err := c.GetMulti(keys)
	require.NoError(t, err)
	require.Len(t, before, len(keys))
	p.Kill()
	q := p.Restart()
	c = mcClient(q.MemcacheAddr)
	after, err := c.GetMulti(keys)
	require.NoError(t, err)
	require.Len(t, after, len(keys), "keys lost in the restart")
	for _, k := range keys {
		require.Equal(t, string(before[k].Value), string(after[k].Value), "value of %s after the restart", k)
	}
	it, err := c.Get("last")
	require.NoError(t, err)
	require.Equal(t, "v", string(it.Value))
	_, err = c.Get("never-written")
	require.True(t, errors.Is(err, memcache.ErrCacheMiss))
}

// metricValue scrapes one unlabelled gauge from a node's /metrics.
func metricValue(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("metric %s not exposed", name)
	return 0
}
