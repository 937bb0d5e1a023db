package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram is a log-linear latency histogram in the style of HdrHistogram:
// values below 2^histSubBits are counted exactly, larger values fall into
// buckets that split every power of two into 2^histSubBits equal parts, so
// any recorded value is known to within 1/128 (< 0.8 %) of itself. Values are
// nanoseconds; anything above histMaxValue is counted in the last bucket
// (min, max and sum stay exact), whose percentiles answer the exact maximum
// so that they never understate a latency.
//
// A Histogram is not safe for concurrent use: each worker records into its
// own and the runner merges them after the workers stop.
type Histogram struct {
	counts []uint64
	total  uint64
	min    int64
	max    int64
	sum    float64
}

const (
	histSubBits   = 7
	histSubCount  = 1 << histSubBits // linear buckets per power of two
	histMaxExp    = 40               // 2^40 ns ≈ 18 minutes
	histMaxValue  = int64(1)<<histMaxExp - 1
	histBucketLen = (histMaxExp - histSubBits + 1) * histSubCount
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, histBucketLen), min: math.MaxInt64}
}

// histIndex maps a value in [0, histMaxValue] to its bucket.
func histIndex(v int64) int {
	if v < histSubCount {
		return int(v)
	}
	// shift keeps the top histSubBits+1 bits of v: mantissa in [128, 256).
	shift := bits.Len64(uint64(v)) - histSubBits - 1
	mantissa := int(v >> uint(shift))
	return (shift+1)*histSubCount + mantissa - histSubCount
}

// histBounds returns the smallest and largest value that map to bucket i.
func histBounds(i int) (lo, hi int64) {
	if i < histSubCount {
		return int64(i), int64(i)
	}
	shift := i/histSubCount - 1
	mantissa := int64(i%histSubCount + histSubCount)
	lo = mantissa << uint(shift)
	hi = lo + int64(1)<<uint(shift) - 1
	return lo, hi
}

// Record adds one observation of d.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.sum += float64(v)
	h.total++
	if v > histMaxValue {
		v = histMaxValue
	}
	h.counts[histIndex(v)]++
}

// Merge adds every observation of o into h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	if o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.total }

// Min is the smallest observation (0 when empty).
func (h *Histogram) Min() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Max is the largest observation, exact.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact arithmetic mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Percentile returns the value below or at which q percent of the
// observations fall (q in [0, 100]): the upper bound of the bucket holding the
// observation of rank ceil(q/100 × count), never more than the exact maximum
// nor less than the exact minimum. It is 0 for an empty histogram.
func (h *Histogram) Percentile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	if q >= 100 {
		return time.Duration(h.max)
	}
	rank := percentileRank(q, h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == len(h.counts)-1 {
				// The last bucket holds every value clamped to
				// histMaxValue: its upper bound is the exact maximum.
				return time.Duration(h.max)
			}
			_, hi := histBounds(i)
			return time.Duration(min(max(hi, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// percentileRank is ceil(q/100 × n), at least 1. q×n is computed first and
// a rounding error of the product is not allowed to push an exact integer
// over to the next rank: q/100 first makes 99.9/100 × 1000 come out as
// 999.0000000000001, whose ceiling (1000) would answer the maximum for p99.9.
func percentileRank(q float64, n uint64) uint64 {
	rank := math.Ceil(q*float64(n)/100 - 1e-6)
	if !(rank >= 1) { // NaN too
		return 1
	}
	return min(uint64(rank), n)
}
