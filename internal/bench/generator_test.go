package bench

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// testGen builds worker's generator of w for kind.
func testGen(t *testing.T, w Workload, kind genKind, worker, workers, total int) *generator {
	t.Helper()
	body := newBodySource(rand.New(rand.NewPCG(9, 9)), w.ValueSize.Max())
	return newGenerator(&w, genParams{kind: kind, runID: "abcd", caseTag: "1", worker: worker, workers: workers,
		total: total, seed: 42, body: body})
}

// keyIndexOf parses the key-space index out of a "abcd:k<base36>___" key.
func keyIndexOf(t *testing.T, key []byte) (tag byte, idx uint64) {
	t.Helper()
	rest, ok := bytes.CutPrefix(key, []byte("abcd:"))
	if !ok {
		t.Fatalf("key %q lacks the run prefix", key)
	}
	tag = rest[0]
	num := bytes.TrimRight(rest[1:], "_")
	idx, err := strconv.ParseUint(string(num), 36, 64)
	if err != nil {
		t.Fatalf("key %q: %v", key, err)
	}
	return tag, idx
}

func TestMembrainMix(t *testing.T) {
	w, _ := Preset("membrain")
	g := testGen(t, w, genMixed, 0, 1, 0)
	const n = 200000
	var op Op
	var gets, sets, misses int
	for range n {
		if !g.next(&op) {
			t.Fatal("mixed stream ended")
		}
		if len(op.Key) != 250 {
			t.Fatalf("key length %d", len(op.Key))
		}
		tag, idx := keyIndexOf(t, op.Key)
		switch op.Kind {
		case OpGet:
			gets++
			if tag == tagMiss {
				misses++
				if op.ExpectHit {
					t.Fatal("a miss key is expected to hit")
				}
			} else if tag != tagKeyspace || idx >= uint64(w.Keys) || !op.ExpectHit {
				t.Fatalf("get of %q (expect hit %v)", op.Key, op.ExpectHit)
			}
		case OpSet:
			sets++
			if tag != tagKeyspace || idx >= uint64(w.Keys) {
				t.Fatalf("set of %q", op.Key)
			}
			if len(op.Value) != 512 || !checkValue(op.Key, op.Value) {
				t.Fatalf("set value of %d bytes, checksum ok %v", len(op.Value), checkValue(op.Key, op.Value))
			}
		}
	}
	// Binomial bounds far beyond 5 sigma: these never flake.
	if r := float64(gets) / n; math.Abs(r-0.9) > 0.005 {
		t.Errorf("get share %.4f, want 0.9", r)
	}
	if r := float64(misses) / float64(gets); math.Abs(r-0.05) > 0.004 {
		t.Errorf("miss share of gets %.4f, want 0.05", r)
	}
}

func TestKeyDistributions(t *testing.T) {
	w, _ := Preset("custom")
	w.Keys, w.GetRatio, w.SetRatio = 1000, 1, 0
	const n = 100000
	counts := func(dist KeyDist, worker, workers int) []int {
		w := w
		w.KeyDist = dist
		g := testGen(t, w, genMixed, worker, workers, 0)
		c := make([]int, w.Keys)
		var op Op
		for range n {
			g.next(&op)
			_, idx := keyIndexOf(t, op.Key)
			c[idx]++
		}
		return c
	}
	// uniform: every tenth of the key space gets about a tenth of the gets.
	u := counts(KeyUniform, 0, 1)
	for d := range 10 {
		sum := 0
		for _, c := range u[d*100 : (d+1)*100] {
			sum += c
		}
		if r := float64(sum) / n; math.Abs(r-0.1) > 0.006 {
			t.Errorf("uniform: decile %d has %.4f of the keys", d, r)
		}
	}
	// seq: cyclic, so every key exactly n/keys times, and worker 1 of 4
	// starts a quarter into the key space.
	for i, c := range counts(KeySeq, 0, 1) {
		if c != n/w.Keys {
			t.Fatalf("seq: key %d read %d times, want %d", i, c, n/w.Keys)
		}
	}
	g := testGen(t, Workload{Name: "x", Mode: ModeMixed, KeySize: 16, ValueSize: FixedSize(10), GetRatio: 1, Keys: 1000, KeyDist: KeySeq, Pipeline: 1}, genMixed, 1, 4, 0)
	var op Op
	g.next(&op)
	if _, idx := keyIndexOf(t, op.Key); idx != 250 {
		t.Errorf("seq: worker 1 of 4 starts at %d, want 250", idx)
	}
	// zipf: hot keys first, key 0 the hottest and far above uniform.
	z := counts(KeyZipf, 0, 1)
	if z[0] < z[1] || z[1] < z[10] || z[0] < 10*n/w.Keys {
		t.Errorf("zipf: counts of keys 0, 1, 10: %d %d %d", z[0], z[1], z[10])
	}
}

func TestValueSizeDistribution(t *testing.T) {
	w, _ := Preset("custom")
	w.GetRatio, w.SetRatio = 0, 1
	w.ValueSize, _ = ParseSizeDist("100:70,1000-2000:30")
	g := testGen(t, w, genMixed, 0, 1, 0)
	const n = 50000
	small := 0
	var op Op
	for range n {
		g.next(&op)
		switch l := len(op.Value); {
		case l == 100:
			small++
		case l < 1000 || l > 2000:
			t.Fatalf("value size %d outside the distribution", l)
		}
	}
	if r := float64(small) / n; math.Abs(r-0.7) > 0.01 {
		t.Errorf("share of 100-byte values %.4f, want 0.7", r)
	}
}

func TestUniqueWritesNeverRepeatAKey(t *testing.T) {
	w, _ := Preset("keyspace-write")
	seen := map[string]bool{}
	for worker := range 3 {
		g := testGen(t, w, genUnique, worker, 3, 0)
		var op Op
		for range 5000 {
			g.next(&op)
			if op.Kind != OpSet || len(op.Value) != 8192 || len(op.Key) != 24 {
				t.Fatalf("op %v key %q value %d", op.Kind, op.Key, len(op.Value))
			}
			if seen[string(op.Key)] {
				t.Fatalf("key %q written twice", op.Key)
			}
			seen[string(op.Key)] = true
		}
	}
}

func TestBulkCycle(t *testing.T) {
	w, _ := Preset("keyspace-bulk")
	g := testGen(t, w, genBulk, 2, 4, 0)
	var op Op
	for cycle := range 3 {
		written := map[string]int{}
		for i := range 10 {
			g.next(&op)
			if op.Kind != OpSet {
				t.Fatalf("cycle %d op %d is a %v, want set", cycle, i, op.Kind)
			}
			written[string(op.Key)] = 0
		}
		if len(written) != 10 {
			t.Fatalf("cycle %d wrote %d distinct keys", cycle, len(written))
		}
		for i := range 100 {
			g.next(&op)
			if _, ok := written[string(op.Key)]; op.Kind != OpGet || !ok || !op.ExpectHit {
				t.Fatalf("cycle %d read %d: %v of %q", cycle, i, op.Kind, op.Key)
			}
			written[string(op.Key)]++
		}
		for k, reads := range written {
			if reads != 10 {
				t.Fatalf("cycle %d: key %q read %d times, want 10", cycle, k, reads)
			}
		}
	}
}

func TestImportStripesCoverEveryRecordOnce(t *testing.T) {
	w, _ := Preset("import")
	const records, workers = 1003, 4
	for _, kind := range []genKind{genStripedSet, genStripedGet} {
		seen := map[string]bool{}
		for worker := range workers {
			g := testGen(t, w, kind, worker, workers, records)
			var op Op
			for g.next(&op) {
				if seen[string(op.Key)] {
					t.Fatalf("record %q twice", op.Key)
				}
				seen[string(op.Key)] = true
				if kind == genStripedSet && (op.Kind != OpSet || len(op.Value) < 64 || len(op.Value) > 200) {
					t.Fatalf("load op %v with a %d-byte value", op.Kind, len(op.Value))
				}
				if kind == genStripedGet && (op.Kind != OpGet || !op.ExpectHit) {
					t.Fatalf("read op %v expect hit %v", op.Kind, op.ExpectHit)
				}
			}
		}
		if len(seen) != records {
			t.Fatalf("%d records covered, want %d", len(seen), records)
		}
	}
}
