package bench

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Mode is the shape of a workload's operation stream.
type Mode string

const (
	// ModeMixed draws gets and sets over a fixed key space (GetRatio:SetRatio),
	// a MissRatio share of the gets aimed at keys that are never written.
	ModeMixed Mode = "mixed"
	// ModeUniqueWrites writes a new key on every operation.
	ModeUniqueWrites Mode = "unique-writes"
	// ModeBulk cycles over BulkKeys fixed keys per worker: each is written
	// once, then read BulkReads times (10 keys, 10 reads: 10 sets + 100 gets).
	ModeBulk Mode = "bulk"
	// ModeImport writes Records records (phase "load"), then reads every one
	// back and checks its checksum (phase "read").
	ModeImport Mode = "import"
)

// KeyDist is how ModeMixed picks a key of the key space.
type KeyDist string

const (
	// KeySeq walks the key space cyclically; worker w starts at w×Keys/workers.
	KeySeq KeyDist = "seq"
	// KeyUniform picks every key with the same probability.
	KeyUniform KeyDist = "uniform"
	// KeyZipf picks key i with probability ∝ 1/(1+i)^1.1: a few hot keys.
	KeyZipf KeyDist = "zipf"
)

// Workload describes one operation stream. Presets fill every field; the
// custom-workload flags override single fields of any preset.
type Workload struct {
	Name string `json:"name"`
	Mode Mode   `json:"mode"`
	// KeySize is the key length in bytes (keys are padded to it; an
	// identifier that needs more is never truncated). 16..250 for memcached.
	KeySize int `json:"key_size"`
	// ValueSize is the distribution of value lengths in bytes.
	ValueSize SizeDist `json:"value_size"`
	// GetRatio:SetRatio is the mix of ModeMixed (9:1 = 90 % gets).
	GetRatio int `json:"get_ratio"`
	SetRatio int `json:"set_ratio"`
	// MissRatio is the share of gets aimed at keys never written (0..1).
	MissRatio float64 `json:"miss_ratio"`
	// Keys is the size of the key space of ModeMixed.
	Keys int `json:"keys"`
	// KeyDist is how ModeMixed picks keys.
	KeyDist KeyDist `json:"key_dist"`
	// Preload writes the whole key space once before the measured cases, so
	// gets of it are expected to hit.
	Preload bool `json:"preload"`
	// Pipeline is how many requests a worker sends before reading replies.
	Pipeline int `json:"pipeline"`
	// BulkKeys and BulkReads shape ModeBulk.
	BulkKeys  int `json:"bulk_keys,omitempty"`
	BulkReads int `json:"bulk_reads,omitempty"`
	// Records is the number of records of ModeImport.
	Records int `json:"records,omitempty"`
}

// PresetNames lists the presets in the order the help text shows them.
var PresetNames = []string{"keyspace-write", "keyspace-read", "keyspace-bulk", "membrain", "import", "custom"}

// Preset returns the named workload with its defaults.
//
// The presets reproduce the hand-written tests kvd's users trust:
//   - keyspace-write: unique keys, 8 KiB values, writes only (Keyspace 2010);
//   - keyspace-read: cyclic reads of a preloaded key space of 8 KiB values;
//   - keyspace-bulk: per worker 10 fixed keys written once and read 10 times
//     each, i.e. 10 writes + 100 reads per cycle;
//   - membrain: 250-byte keys (memcached's maximum; the original used 256,
//     which memcached refuses), 512-byte values, get:set 9:1, 5 % of gets
//     missing (Membrain 2012);
//   - import: N records of 64..200-byte values (about 1.4 GB per 10.2 M
//     records at full size), then all read back and checksum-verified
//     (MemcacheDB vs Kyoto Tycoon 2011);
//   - custom: a plain mixed workload for the custom flags to shape.
func Preset(name string) (Workload, error) {
	switch name {
	case "keyspace-write":
		return Workload{Name: name, Mode: ModeUniqueWrites, KeySize: 24, ValueSize: FixedSize(8192),
			SetRatio: 1, Pipeline: 1}, nil
	case "keyspace-read":
		return Workload{Name: name, Mode: ModeMixed, KeySize: 24, ValueSize: FixedSize(8192),
			GetRatio: 1, Keys: 4096, KeyDist: KeySeq, Preload: true, Pipeline: 1}, nil
	case "keyspace-bulk":
		return Workload{Name: name, Mode: ModeBulk, KeySize: 24, ValueSize: FixedSize(8192),
			GetRatio: 10, SetRatio: 1, BulkKeys: 10, BulkReads: 10, Pipeline: 1}, nil
	case "membrain":
		return Workload{Name: name, Mode: ModeMixed, KeySize: 250, ValueSize: FixedSize(512),
			GetRatio: 9, SetRatio: 1, MissRatio: 0.05, Keys: 50000, KeyDist: KeyUniform, Preload: true, Pipeline: 1}, nil
	case "import":
		return Workload{Name: name, Mode: ModeImport, KeySize: 24, ValueSize: SizeDist{{Min: 64, Max: 200, Weight: 1}},
			Records: 100000, Pipeline: 1}, nil
	case "custom":
		return Workload{Name: name, Mode: ModeMixed, KeySize: 32, ValueSize: FixedSize(100),
			GetRatio: 1, SetRatio: 1, Keys: 10000, KeyDist: KeyUniform, Preload: true, Pipeline: 1}, nil
	}
	return Workload{}, fmt.Errorf("--workload: unknown workload %q (one of %s)", name, strings.Join(PresetNames, ", "))
}

// maxKeySize is memcached's key length limit.
const maxKeySize = 250

// checksumLen is the room a checksummed value needs (see value.go).
const checksumLen = 8

// Validate reports every problem of w at once, each naming its flag.
// memcacheKeys applies the memcached key-length limit.
func (w *Workload) Validate(memcacheKeys bool, verify bool) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch w.Mode {
	case ModeMixed, ModeUniqueWrites, ModeBulk, ModeImport:
	default:
		bad("--workload: unknown mode %q", w.Mode)
	}
	if w.KeySize < 16 {
		bad("--key-size: %d is too small (at least 16 bytes, to keep keys unique)", w.KeySize)
	}
	if memcacheKeys && w.KeySize > maxKeySize {
		bad("--key-size: %d is over memcached's key limit of %d bytes", w.KeySize, maxKeySize)
	} else if w.KeySize > maxValueSize {
		// Every request carries one key: no server takes one this long.
		bad("--key-size: %d is over the limit of %d bytes", w.KeySize, maxValueSize)
	}
	if err := w.ValueSize.validate(); err != nil {
		bad("--value-size: %v", err)
	} else if (verify || w.Mode == ModeImport) && w.ValueSize.Min() < checksumLen {
		bad("--value-size: values of %d bytes cannot carry the %d-byte checksum that --verify and import need", w.ValueSize.Min(), checksumLen)
	}
	if w.GetRatio < 0 || w.SetRatio < 0 || w.GetRatio > maxWeight || w.SetRatio > maxWeight ||
		(w.Mode == ModeMixed && w.GetRatio+w.SetRatio == 0) {
		bad("--get-set: %d:%d needs parts in [0, %d], not both zero", w.GetRatio, w.SetRatio, maxWeight)
	}
	if !(w.MissRatio >= 0 && w.MissRatio <= 1) { // NaN too
		bad("--miss-ratio: %g is not in [0, 1]", w.MissRatio)
	}
	if w.Mode == ModeMixed && (w.Keys < 1 || w.Keys > 1<<31) {
		bad("--keys: %d is not in [1, 2^31]", w.Keys)
	}
	switch w.KeyDist {
	case KeySeq, KeyUniform, KeyZipf:
	case "":
		if w.Mode == ModeMixed {
			bad("--key-dist: missing (seq, uniform or zipf)")
		}
	default:
		bad("--key-dist: %q is not seq, uniform or zipf", w.KeyDist)
	}
	if w.Pipeline < 1 || w.Pipeline > 256 {
		bad("--pipeline: %d is not in [1, 256]", w.Pipeline)
	}
	if w.Mode == ModeBulk && (w.BulkKeys < 1 || w.BulkReads < 0) {
		bad("--workload: bulk needs at least one key")
	}
	if w.Mode == ModeImport && (w.Records < 1 || w.Records > 1<<31) {
		bad("--records: %d is not in [1, 2^31]", w.Records)
	}
	return errors.Join(errs...)
}

// Describe is a one-line human summary of w.
func (w *Workload) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", w.Name)
	switch w.Mode {
	case ModeMixed:
		fmt.Fprintf(&b, "get:set %d:%d", w.GetRatio, w.SetRatio)
		if w.MissRatio > 0 {
			fmt.Fprintf(&b, ", %g%% of gets missing", w.MissRatio*100)
		}
		fmt.Fprintf(&b, ", %d keys (%s)", w.Keys, w.KeyDist)
		if w.Preload {
			b.WriteString(" preloaded")
		}
	case ModeUniqueWrites:
		b.WriteString("writes of unique keys")
	case ModeBulk:
		fmt.Fprintf(&b, "%d keys per client written once, read %d times each", w.BulkKeys, w.BulkReads)
	case ModeImport:
		fmt.Fprintf(&b, "import %d records, then read all back verified", w.Records)
	}
	fmt.Fprintf(&b, ", key %d B, value %s B", w.KeySize, w.ValueSize)
	if w.Pipeline > 1 {
		fmt.Fprintf(&b, ", pipeline %d", w.Pipeline)
	}
	return b.String()
}

// SizeRange is one weighted part of a size distribution: a size drawn
// uniformly from [Min, Max].
type SizeRange struct {
	Min    int `json:"min"`
	Max    int `json:"max"`
	Weight int `json:"weight"`
}

// SizeDist is a weighted mix of size ranges.
type SizeDist []SizeRange

// FixedSize is the distribution that always yields n.
func FixedSize(n int) SizeDist { return SizeDist{{Min: n, Max: n, Weight: 1}} }

// maxValueSize bounds generated values (memcached's default item limit).
const maxValueSize = 1 << 20

// maxWeight bounds each part of a get:set ratio and each size weight. A
// million to one is finer than any mix needs, and it keeps the sums the
// generator draws from (a part plus the others) far from overflowing int,
// which made a huge weight crash the run.
const maxWeight = 1_000_000

// ParseSizeDist parses "512", "64-200" (uniform) or a weighted list
// "100:70,1000:25,10000-20000:5" (weights are relative).
func ParseSizeDist(s string) (SizeDist, error) {
	var d SizeDist
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		r := SizeRange{Weight: 1}
		spec := part
		if i := strings.IndexByte(part, ':'); i >= 0 {
			spec = part[:i]
			w, err := strconv.Atoi(strings.TrimSuffix(part[i+1:], "%"))
			if err != nil || w < 1 || w > maxWeight {
				return nil, fmt.Errorf("%q: weight must be an integer in [1, %d]", part, maxWeight)
			}
			r.Weight = w
		}
		lo, hi, isRange := strings.Cut(spec, "-")
		var err error
		if r.Min, err = strconv.Atoi(lo); err != nil {
			return nil, fmt.Errorf("%q: %q is not a size in bytes", part, lo)
		}
		r.Max = r.Min
		if isRange {
			if r.Max, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("%q: %q is not a size in bytes", part, hi)
			}
		}
		d = append(d, r)
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d SizeDist) validate() error {
	if len(d) == 0 {
		return errors.New("empty size distribution")
	}
	for _, r := range d {
		if r.Min < 0 || r.Max < r.Min || r.Max > maxValueSize || r.Weight < 1 || r.Weight > maxWeight {
			return fmt.Errorf("range %d-%d (weight %d) must satisfy 0 ≤ min ≤ max ≤ %d, 1 ≤ weight ≤ %d", r.Min, r.Max, r.Weight, maxValueSize, maxWeight)
		}
	}
	return nil
}

// Min and Max are the bounds of every size d can yield.
func (d SizeDist) Min() int {
	m := maxValueSize
	for _, r := range d {
		m = min(m, r.Min)
	}
	return m
}

// Max is the largest size d can yield.
func (d SizeDist) Max() int {
	m := 0
	for _, r := range d {
		m = max(m, r.Max)
	}
	return m
}

// Mean is the expected size.
func (d SizeDist) Mean() float64 {
	var sum, wsum float64
	for _, r := range d {
		sum += float64(r.Weight) * float64(r.Min+r.Max) / 2
		wsum += float64(r.Weight)
	}
	if wsum == 0 {
		return 0
	}
	return sum / wsum
}

func (d SizeDist) String() string {
	parts := make([]string, len(d))
	for i, r := range d {
		s := strconv.Itoa(r.Min)
		if r.Max != r.Min {
			s += "-" + strconv.Itoa(r.Max)
		}
		if len(d) > 1 {
			s += ":" + strconv.Itoa(r.Weight)
		}
		parts[i] = s
	}
	return strings.Join(parts, ",")
}

// ParseRatio parses a get:set ratio such as "9:1".
func ParseRatio(s string) (get, set int, err error) {
	g, st, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not GET:SET (for example 9:1)", s)
	}
	if get, err = strconv.Atoi(strings.TrimSpace(g)); err != nil || get < 0 || get > maxWeight {
		return 0, 0, fmt.Errorf("%q: %q is not an integer in [0, %d]", s, g, maxWeight)
	}
	if set, err = strconv.Atoi(strings.TrimSpace(st)); err != nil || set < 0 || set > maxWeight {
		return 0, 0, fmt.Errorf("%q: %q is not an integer in [0, %d]", s, st, maxWeight)
	}
	if get+set == 0 {
		return 0, 0, fmt.Errorf("%q: both parts are zero", s)
	}
	return get, set, nil
}

// ParseConcurrency parses a sweep such as "1,2,4,6,8" (duplicates dropped,
// kept in the given order).
func ParseConcurrency(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("%q is not an integer in [1, 4096]", part)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// sortedKeys returns m's keys in order (for stable output).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
