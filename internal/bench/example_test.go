package bench_test

import (
	"fmt"
	"time"

	"github.com/kvd-project/kvd/internal/bench"
)

func ExampleHistogram() {
	h := bench.NewHistogram()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	fmt.Println(h.Count(), h.Min(), h.Max())
	// Percentiles are the upper bound of their bucket: within 1/128 above.
	fmt.Println(h.Percentile(50), h.Percentile(99))
	// Output:
	// 1000 1µs 1ms
	// 501.759µs 991.231µs
}

func ExampleParseSizeDist() {
	d, err := bench.ParseSizeDist("100:70,1000-2000:30")
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Min(), d.Max(), d.Mean())
	// Output: 100 2000 520
}
