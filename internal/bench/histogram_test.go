package bench

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestHistogramBucketsCoverEveryValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(v int64) {
		t.Helper()
		i := histIndex(v)
		if i < 0 || i >= histBucketLen {
			t.Fatalf("value %d: index %d out of [0,%d)", v, i, histBucketLen)
		}
		lo, hi := histBounds(i)
		if v < lo || v > hi {
			t.Fatalf("value %d: bucket %d is [%d,%d]", v, i, lo, hi)
		}
		if v >= histSubCount && float64(hi-lo+1)/float64(lo) > 1.0/histSubCount+1e-12 {
			t.Fatalf("value %d: bucket [%d,%d] wider than 1/%d", v, lo, hi, histSubCount)
		}
	}
	for v := range int64(5000) {
		check(v)
	}
	for range 100000 {
		check(rng.Int64N(histMaxValue + 1))
	}
	check(histMaxValue)
	// Buckets are contiguous and increasing.
	for i := 1; i < histBucketLen; i++ {
		_, prevHi := histBounds(i - 1)
		lo, _ := histBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ends at %d", i, lo, prevHi)
		}
	}
}

func TestHistogramPercentilesOnKnownData(t *testing.T) {
	h := NewHistogram()
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	if h.Count() != 10000 {
		t.Fatalf("count %d", h.Count())
	}
	if h.Min() != time.Microsecond || h.Max() != 10000*time.Microsecond {
		t.Fatalf("min %v max %v", h.Min(), h.Max())
	}
	if got, want := h.Mean(), 5000500*time.Nanosecond; got != want {
		t.Fatalf("mean %v, want %v", got, want)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration // the exact value of rank ceil(q/100 × n)
	}{
		{0, time.Microsecond}, {50, 5000 * time.Microsecond}, {90, 9000 * time.Microsecond},
		{99, 9900 * time.Microsecond}, {99.9, 9990 * time.Microsecond}, {100, 10000 * time.Microsecond},
	} {
		got := h.Percentile(tc.q)
		// The histogram answers the upper bound of the exact value's bucket.
		if got < tc.want || float64(got-tc.want) > float64(tc.want)/histSubCount {
			t.Errorf("p%g = %v, want %v within 1/%d above", tc.q, got, tc.want, histSubCount)
		}
	}
}

func TestHistogramSmallValuesAreExact(t *testing.T) {
	h := NewHistogram()
	for _, v := range []int64{3, 1, 2, 100, 127} {
		h.Record(time.Duration(v))
	}
	for q, want := range map[float64]time.Duration{20: 1, 40: 2, 60: 3, 80: 100, 100: 127} {
		if got := h.Percentile(q); got != want {
			t.Errorf("p%g = %d, want %d", q, got, want)
		}
	}
}

func TestHistogramMergeEqualsRecordingAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := range 20000 {
		d := time.Duration(rng.ExpFloat64() * float64(200*time.Microsecond))
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(b)
	a.Merge(nil)
	a.Merge(NewHistogram())
	for _, q := range []float64{0, 1, 50, 90, 99, 99.9, 99.99, 100} {
		if a.Percentile(q) != all.Percentile(q) {
			t.Errorf("p%g: merged %v, direct %v", q, a.Percentile(q), all.Percentile(q))
		}
	}
	if a.Count() != all.Count() || a.Min() != all.Min() || a.Max() != all.Max() {
		t.Errorf("merged count/min/max %d/%v/%v, direct %d/%v/%v", a.Count(), a.Min(), a.Max(), all.Count(), all.Min(), all.Max())
	}
	if math.Abs(float64(a.Mean()-all.Mean())) > 1 {
		t.Errorf("mean %v vs %v", a.Mean(), all.Mean())
	}
}

func TestHistogramEdges(t *testing.T) {
	h := NewHistogram()
	if h.Percentile(50) != 0 || h.Mean() != 0 || h.Min() != 0 || h.Max() != 0 {
		t.Fatal("empty histogram must answer 0")
	}
	h.Record(-5)               // clamped to 0
	h.Record(time.Hour * 1000) // above the range: clamped in a bucket, max exact
	if h.Min() != 0 || h.Max() != time.Hour*1000 {
		t.Fatalf("min %v max %v", h.Min(), h.Max())
	}
	if got := h.Percentile(100); got != time.Hour*1000 {
		t.Fatalf("p100 %v", got)
	}
	if got := h.Percentile(99); got > time.Hour*1000 || got < time.Duration(histMaxValue)-time.Duration(histMaxValue)/histSubCount {
		t.Fatalf("p99 of a clamped value %v", got)
	}
}
