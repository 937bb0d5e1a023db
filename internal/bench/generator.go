package bench

import (
	"math/rand/v2"
	"strconv"
)

// OpKind is what an operation does.
type OpKind uint8

const (
	// OpGet reads one key.
	OpGet OpKind = iota + 1
	// OpSet writes one key unconditionally.
	OpSet
)

func (k OpKind) String() string {
	switch k {
	case OpGet:
		return "get"
	case OpSet:
		return "set"
	}
	return "op" + strconv.Itoa(int(k))
}

// Op is one request. Key and Value alias buffers owned by the Op, reused for
// the next operation generated into it.
type Op struct {
	Kind  OpKind
	Key   []byte
	Value []byte // sets only
	// ExpectHit marks a get of a key the workload has written: a miss is a
	// missing value, not an intended miss.
	ExpectHit bool
}

// genKind is the shape of one generator's stream.
type genKind uint8

const (
	genMixed      genKind = iota // ModeMixed
	genUnique                    // ModeUniqueWrites
	genBulk                      // ModeBulk
	genStripedSet                // import load phase and preload: set records worker, worker+workers, …
	genStripedGet                // import read phase: get the same records, expecting hits
)

// Key tags keep every family of keys disjoint: k keyspace, m never-written
// (misses), u unique writes, b bulk, r import records. Keys are padded with
// '_', which no identifier contains.
const (
	tagKeyspace = 'k'
	tagMiss     = 'm'
	tagUnique   = 'u'
	tagBulk     = 'b'
	tagRecord   = 'r'
	keyPad      = '_'
)

// generator produces one worker's operations. It is owned by that worker.
type generator struct {
	w       *Workload
	kind    genKind
	prefix  []byte // "<run>:" for key-space keys
	scope   []byte // "<run>:<case>" appended for per-case keys
	worker  int
	workers int
	rng     *rand.Rand
	zipf    *rand.Zipf
	body    *bodySource
	cumW    []int // cumulative weights of w.ValueSize
	pos     uint64
	count   uint64 // records this generator still has (striped kinds)
}

// genParams identifies a generator's place in a run.
type genParams struct {
	kind    genKind
	runID   string // 4-character id from the seed: runs with different seeds write different keys, a repeated --seed repeats them
	caseTag string // distinguishes per-case keys (unique, bulk, import)
	worker  int
	workers int
	total   int // records (striped kinds)
	// limited caps this worker's share of the records at limit: the import
	// read phase reads back exactly the records its worker attempted to load.
	limited bool
	limit   int64
	seed    uint64
	body    *bodySource
}

func newGenerator(w *Workload, p genParams) *generator {
	g := &generator{
		w:       w,
		kind:    p.kind,
		prefix:  []byte(p.runID + ":"),
		scope:   []byte(p.runID + ":" + p.caseTag + "."),
		worker:  p.worker,
		workers: max(p.workers, 1),
		rng:     rand.New(rand.NewPCG(p.seed, uint64(p.worker)*0x9e3779b97f4a7c15+1)),
		body:    p.body,
	}
	acc := 0
	for _, r := range w.ValueSize {
		acc += r.Weight
		g.cumW = append(g.cumW, acc)
	}
	switch p.kind {
	case genMixed:
		if w.KeyDist == KeySeq && w.Keys > 0 {
			g.pos = uint64(p.worker) * uint64(w.Keys) / uint64(g.workers)
		}
		if w.KeyDist == KeyZipf && w.Keys > 1 {
			g.zipf = rand.NewZipf(g.rng, 1.1, 1, uint64(w.Keys-1))
		}
	case genStripedSet, genStripedGet:
		g.pos = uint64(p.worker)
		if p.worker < p.total {
			g.count = uint64((p.total - p.worker + g.workers - 1) / g.workers)
		}
		if p.limited {
			g.count = min(g.count, uint64(p.limit))
		}
	}
	return g
}

// next fills op with the next operation; false when a finite stream
// (import, preload) is exhausted.
func (g *generator) next(op *Op) bool {
	op.ExpectHit = false
	switch g.kind {
	case genMixed:
		isGet := g.rng.IntN(g.w.GetRatio+g.w.SetRatio) < g.w.GetRatio
		if isGet && g.w.MissRatio > 0 && g.rng.Float64() < g.w.MissRatio {
			op.Kind = OpGet
			g.key(op, g.prefix, tagMiss, g.rng.Uint64()>>8, -1)
			return true
		}
		idx := g.keyIndex()
		g.key(op, g.prefix, tagKeyspace, idx, -1)
		if isGet {
			op.Kind = OpGet
			op.ExpectHit = g.w.Preload
		} else {
			g.set(op)
		}
	case genUnique:
		g.key(op, g.scope, tagUnique, uint64(g.worker), int64(g.pos))
		g.pos++
		g.set(op)
	case genBulk:
		n := uint64(g.w.BulkKeys)
		cycle := n * uint64(1+g.w.BulkReads)
		p := g.pos % cycle
		g.pos++
		if p < n {
			g.key(op, g.scope, tagBulk, uint64(g.worker), int64(p))
			g.set(op)
		} else {
			g.key(op, g.scope, tagBulk, uint64(g.worker), int64((p-n)%n))
			op.Kind = OpGet
			op.ExpectHit = true
		}
	case genStripedSet, genStripedGet:
		if g.count == 0 {
			return false
		}
		g.count--
		idx := g.pos
		g.pos += uint64(g.workers)
		if g.w.Mode == ModeImport {
			g.key(op, g.scope, tagRecord, idx, -1)
		} else {
			g.key(op, g.prefix, tagKeyspace, idx, -1)
		}
		if g.kind == genStripedSet {
			g.set(op)
		} else {
			op.Kind = OpGet
			op.ExpectHit = true
		}
	}
	return true
}

// keyIndex picks a key-space index by the workload's distribution.
func (g *generator) keyIndex() uint64 {
	n := uint64(g.w.Keys)
	switch g.w.KeyDist {
	case KeySeq:
		i := g.pos % n
		g.pos++
		return i
	case KeyZipf:
		if g.zipf != nil {
			return g.zipf.Uint64()
		}
		return 0
	default:
		return g.rng.Uint64N(n)
	}
}

// key writes prefix, tag, base-36 a (and ".b" when b ≥ 0), padded to KeySize.
func (g *generator) key(op *Op, prefix []byte, tag byte, a uint64, b int64) {
	k := append(op.Key[:0], prefix...)
	k = append(k, tag)
	k = strconv.AppendUint(k, a, 36)
	if b >= 0 {
		k = append(k, '.')
		k = strconv.AppendUint(k, uint64(b), 36)
	}
	for len(k) < g.w.KeySize {
		k = append(k, keyPad)
	}
	op.Key = k
}

// set makes op a set of its key with a fresh checksummed value.
func (g *generator) set(op *Op) {
	op.Kind = OpSet
	op.Value = g.body.makeValue(op.Value, op.Key, g.valueSize(), g.rng.Uint64())
}

// valueSize draws a size from the workload's distribution.
func (g *generator) valueSize() int {
	d := g.w.ValueSize
	i := 0
	if len(d) > 1 {
		r := g.rng.IntN(g.cumW[len(g.cumW)-1])
		for r >= g.cumW[i] {
			i++
		}
	}
	if d[i].Max == d[i].Min {
		return d[i].Min
	}
	return d[i].Min + g.rng.IntN(d[i].Max-d[i].Min+1)
}
