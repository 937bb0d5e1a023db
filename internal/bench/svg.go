package bench

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// A minimal SVG line-chart renderer for the HTML report: no JavaScript, no
// external assets, so the page is one self-contained file.

type tick struct {
	pos   float64
	label string
}

type series struct {
	name   string
	xs, ys []float64
	errs   []float64 // optional ± bars
	color  string
	dashed bool
}

type chart struct {
	title, xLabel, yLabel string
	xTicks                []tick // positions in data units; the x range spans them
	logY                  bool
	series                []series
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

const (
	svgW, svgH                     = 760, 380
	padL, padR, padT, padB float64 = 78, 170, 36, 52
)

func (c *chart) svg() string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		svgW, svgH, svgW, svgH, html.EscapeString(c.title))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`)
	fmt.Fprintf(&b, `<text x="%g" y="22" font-size="15" font-weight="bold">%s</text>`, padL, html.EscapeString(c.title))

	// x range from the ticks (or the data).
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, t := range c.xTicks {
		xmin, xmax = math.Min(xmin, t.pos), math.Max(xmax, t.pos)
	}
	var ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, s := range c.series {
		for i, x := range s.xs {
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			y, e := s.ys[i], 0.0
			if s.errs != nil {
				e = s.errs[i]
			}
			if c.logY && y <= 0 {
				continue
			}
			ymin, ymax = math.Min(ymin, y-e), math.Max(ymax, y+e)
		}
	}
	if math.IsInf(xmin, 0) || math.IsInf(ymin, 0) {
		b.WriteString(`<text x="300" y="190" font-size="14">no data</text></svg>`)
		return b.String()
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	// y axis: linear from 0 with nice steps, or log decades.
	var yTicks []tick
	var ymap func(float64) float64
	plotH := svgH - padT - padB
	plotW := svgW - padL - padR
	if c.logY {
		lo := math.Floor(math.Log10(math.Max(ymin, 1e-3)))
		hi := math.Ceil(math.Log10(ymax))
		if hi <= lo {
			hi = lo + 1
		}
		for d := lo; d <= hi; d++ {
			yTicks = append(yTicks, tick{math.Pow(10, d), formatDecadeUs(d)})
		}
		ymap = func(y float64) float64 {
			y = math.Max(y, math.Pow(10, lo))
			return padT + plotH*(1-(math.Log10(y)-lo)/(hi-lo))
		}
	} else {
		step := niceStep(ymax / 5)
		top := math.Ceil(ymax/step) * step
		if top <= 0 {
			top, step = 1, 0.2
		}
		for v := 0.0; v <= top*1.0001; v += step {
			yTicks = append(yTicks, tick{v, formatCount(v)})
		}
		ymap = func(y float64) float64 { return padT + plotH*(1-y/top) }
	}
	xmap := func(x float64) float64 {
		margin := 0.04 * (xmax - xmin)
		return padL + plotW*(x-xmin+margin)/(xmax-xmin+2*margin)
	}

	// grid and axes
	for _, t := range yTicks {
		y := ymap(t.pos)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, padL, y, padL+plotW, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`, padL-6, y+4, t.label)
	}
	for _, t := range c.xTicks {
		x := xmap(t.pos)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#f0f0f0"/>`, x, padT, x, padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`, x, padT+plotH+16, html.EscapeString(t.label))
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`, padL, padT, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">%s</text>`, padL+plotW/2, float64(svgH)-12, html.EscapeString(c.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" font-size="12" text-anchor="middle">%s</text>`, padT+plotH/2, html.EscapeString(c.yLabel))

	// series
	for i, s := range c.series {
		color := s.color
		if color == "" {
			color = palette[i%len(palette)]
		}
		var pts []string
		for j, x := range s.xs {
			if c.logY && s.ys[j] <= 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xmap(x), ymap(s.ys[j])))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="5 4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`, color, dash, strings.Join(pts, " "))
		for j, x := range s.xs {
			if c.logY && s.ys[j] <= 0 {
				continue
			}
			px, py := xmap(x), ymap(s.ys[j])
			if s.errs != nil && s.errs[j] > 0 {
				lo, hi := ymap(math.Max(s.ys[j]-s.errs[j], 0)), ymap(s.ys[j]+s.errs[j])
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, px, lo, px, hi, color)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, px-4, lo, px+4, lo, color)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, px-4, hi, px+4, hi, color)
			}
			if len(s.xs) <= 40 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s</title></circle>`,
					px, py, color, html.EscapeString(s.name), strconv.FormatFloat(s.ys[j], 'g', 6, 64))
			}
		}
		ly := padT + 8 + float64(i)*18
		lx := padL + plotW + 14
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`, lx, ly, lx+22, ly, color, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12">%s</text>`, lx+28, ly+4, html.EscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// formatDecadeUs labels 10^d microseconds: 1µs, 10µs, 100µs, 1ms, ….
func formatDecadeUs(d float64) string {
	units := []string{"µs", "ms", "s"}
	i := min(max(int(math.Floor(d/3)), 0), len(units)-1)
	return strconv.FormatFloat(math.Pow(10, d-float64(3*i)), 'f', -1, 64) + units[i]
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}
