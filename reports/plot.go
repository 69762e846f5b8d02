package reports

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/history"
)

// The plots are SVG drawn here rather than in the browser: they are small
// (aggregated into buckets, whatever the history's size), they show without
// JavaScript, and the page stays one file.

// plotBuckets is how many time buckets the latency and throughput plots use:
// enough to see a fault's effect, few enough that a 100k-op history draws
// the same few kilobytes as a 1k-op one.
const plotBuckets = 150

var outcomeColor = map[string]string{"ok": "#2f9e5b", "fail": "#d9534f", "info": "#e0a526"}

type tick struct {
	Pos   float64
	Label string
}

type band struct {
	X, W   float64
	Color  string
	Label  string
	Marker bool
	Open   bool
}

type series struct {
	Name  string
	Color string
	D     string
	Dash  string
	Width float64
}

type plot struct {
	Title  string
	Aria   string
	W, H   float64
	L, T   float64 // inner plot origin
	IW, IH float64 // inner plot size
	XTicks []tick
	YTicks []tick
	YLabel string
	Bands  []band
	Series []series
	Empty  string // shown instead of data when there is none
}

func newPlot(title string, w, h float64) *plot {
	p := &plot{Title: title, Aria: title, W: w, H: h, L: 58, T: 10}
	p.IW = w - p.L - 12
	p.IH = h - p.T - 26
	return p
}

func (p *plot) x(t, end int64) float64 {
	if end <= 0 {
		return p.L
	}
	return p.L + float64(t)/float64(end)*p.IW
}

// timeAxis puts second ticks on the x axis and shades the faults.
func (p *plot) timeAxis(end int64, faults []analysis.Fault, colors map[string]string) {
	for _, v := range niceTicks(0, float64(end)/1e9, 8) {
		if v*1e9 > float64(end)*1.001 {
			continue // niceTicks rounds up past the end of the run
		}
		p.XTicks = append(p.XTicks, tick{Pos: p.x(int64(v*1e9), end), Label: trimFloat(v) + " s"})
	}
	for _, f := range faults {
		x0, x1 := p.x(f.Start, end), p.x(f.Stop, end)
		b := band{X: x0, W: math.Max(x1-x0, 0), Color: colors[f.Nemesis], Label: fmt.Sprintf("%s: %s – %s", clip(f.Label(), 160), seconds(f.Start), seconds(f.Stop)), Open: f.Open}
		if f.Stop == f.Start {
			b.Marker = true
		}
		p.Bands = append(p.Bands, b)
	}
}

// faultColors assigns palette colours to nemeses in order of appearance.
// throughputPlot draws completed operations per second by outcome.
func throughputPlot(v *opsView, faults []analysis.Fault, colors map[string]string) *plot {
	p := newPlot("Throughput (completed operations per second, by outcome)", 960, 220)
	if len(v.ops) == 0 || v.end <= 0 {
		p.Empty = "no operations"
		return p
	}
	p.timeAxis(v.end, faults, colors)
	width := float64(v.end) / plotBuckets
	counts := map[history.Outcome][]float64{}
	for _, o := range []history.Outcome{history.OutcomeOk, history.OutcomeFail, history.OutcomeInfo} {
		counts[o] = make([]float64, plotBuckets)
	}
	for i := range v.ops {
		o := v.brief(i)
		if !done(&o) {
			continue
		}
		b := min(int(float64(o.Completed)/width), plotBuckets-1)
		counts[o.Outcome][b]++
	}
	perSec := 1e9 / width
	top := 0.0
	for _, c := range counts {
		for i := range c {
			c[i] *= perSec
			top = max(top, c[i])
		}
	}
	yt := niceTicks(0, top, 5)
	ymax := max(yt[len(yt)-1], 1)
	y := func(v float64) float64 { return p.T + p.IH - v/ymax*p.IH }
	for _, v := range yt {
		p.YTicks = append(p.YTicks, tick{Pos: y(v), Label: trimFloat(v)})
	}
	for _, o := range []history.Outcome{history.OutcomeOk, history.OutcomeFail, history.OutcomeInfo} {
		var d strings.Builder
		any := false
		for i, v := range counts[o] {
			if v > 0 {
				any = true
			}
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			x := p.L + (float64(i)+0.5)/plotBuckets*p.IW
			fmt.Fprintf(&d, "%s%.1f %.1f", cmd, x, y(v))
		}
		if any {
			p.Series = append(p.Series, series{Name: o.String(), Color: outcomeColor[o.String()], D: d.String(), Width: 1.6})
		}
	}
	return p
}

// latencyPlots draws, per operation type, the p50, p99 and maximum latency
// of the operations invoked in each time bucket, on a log scale (a pause
// turns milliseconds into seconds).
func latencyPlots(v *opsView, faults []analysis.Fault, colors map[string]string) []*plot {
	// The operations are by call, so the buckets come one after another:
	// each bucket's latencies are kept until it ends, and then only its
	// quantiles (every operation's latency, kept to the end, had been 8 to
	// 16 bytes per operation of the report's peak).
	byF := map[string][]bucketLatency{}
	var fs []string
	width := float64(v.end) / plotBuckets
	lo, hi := int64(math.MaxInt64), int64(0)
	cur, at := map[string][]int64{}, -1 // the latencies of bucket at, by f
	flush := func() {
		for f, b := range cur {
			if len(b) > 0 {
				slices.Sort(b)
				byF[f][at] = bucketLatency{n: len(b), max: analysis.Quantile(b, 1), p99: analysis.Quantile(b, 0.99), p50: analysis.Quantile(b, 0.5)}
				cur[f] = b[:0]
			}
		}
	}
	for i := range v.ops {
		o := v.brief(i)
		if !done(&o) || o.Outcome == history.OutcomeInfo || v.end <= 0 {
			continue
		}
		if _, ok := byF[o.F]; !ok {
			byF[o.F] = make([]bucketLatency, plotBuckets)
			fs = append(fs, o.F)
		}
		d := max(o.Completed-o.Call, 1000) // below 1 µs is noise on a log scale
		b := min(int(float64(o.Call)/width), plotBuckets-1)
		if b != at {
			flush()
			at = b
		}
		cur[o.F] = append(cur[o.F], d)
		lo, hi = min(lo, d), max(hi, d)
	}
	flush()
	slices.SortFunc(fs, func(x, y string) int { return analysis.OpOrder(x) - analysis.OpOrder(y) })
	if len(fs) == 0 {
		return nil
	}
	// One y range for all the small plots so they compare at a glance.
	e0 := math.Floor(math.Log10(float64(lo)))
	e1 := math.Ceil(math.Log10(float64(hi)))
	if e1 <= e0 {
		e1 = e0 + 1
	}
	var out []*plot
	for _, f := range fs {
		p := newPlot("Latency of "+f+" (p50, p99, max per bucket)", 470, 180)
		p.timeAxis(v.end, faults, colors)
		y := func(v int64) float64 {
			return p.T + p.IH - (math.Log10(float64(v))-e0)/(e1-e0)*p.IH
		}
		for e := e0; e <= e1; e++ {
			p.YTicks = append(p.YTicks, tick{Pos: y(int64(math.Pow(10, e))), Label: durationLabel(int64(math.Pow(10, e)))})
		}
		qs := []struct {
			name  string
			q     func(bucketLatency) int64
			color string
			dash  string
			width float64
		}{{"max", bucketLatency.maxOf, "#b9c3d3", "2 2", 1}, {"p99", bucketLatency.p99Of, "#6b7fa6", "", 1.2},
			{"p50", bucketLatency.p50Of, "#1f3b70", "", 1.8}}
		for _, q := range qs {
			var d strings.Builder
			pen := "M"
			bs := byF[f]
			for i, b := range bs {
				if b.n == 0 {
					pen = "M" // a gap: no operation started in this bucket
					continue
				}
				val := q.q(b)
				x := p.L + (float64(i)+0.5)/plotBuckets*p.IW
				if pen == "M" && (i+1 == len(bs) || bs[i+1].n == 0) {
					// A bucket alone between gaps (renews are rare: one
					// every few buckets) is a point a path would not
					// draw: a dash across its bucket instead.
					half := 0.5 / plotBuckets * p.IW
					fmt.Fprintf(&d, "M%.1f %.1fL%.1f %.1f", x-half, y(val), x+half, y(val))
					continue
				}
				fmt.Fprintf(&d, "%s%.1f %.1f", pen, x, y(val))
				pen = "L"
			}
			p.Series = append(p.Series, series{Name: q.name, Color: q.color, D: d.String(), Dash: q.dash, Width: q.width})
		}
		out = append(out, p)
	}
	return out
}

// bucketLatency is what a latency plot draws of one bucket of one
// operation type: how many completed, and their quantiles.
type bucketLatency struct {
	n             int
	max, p99, p50 int64
}

func (b bucketLatency) maxOf() int64 { return b.max }
func (b bucketLatency) p99Of() int64 { return b.p99 }
func (b bucketLatency) p50Of() int64 { return b.p50 }

// niceTicks returns about n round values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Floor(lo/step) * step; v <= hi+step*0.999; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

func trimFloat(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// durationLabel formats a latency in ns compactly: "100 µs", "10 ms", "1 s".
func durationLabel(ns int64) string {
	switch {
	case ns >= 1e9:
		return threeDigits(float64(ns)/1e9) + " s"
	case ns >= 1e6:
		return threeDigits(float64(ns)/1e6) + " ms"
	case ns >= 1e3:
		return threeDigits(float64(ns)/1e3) + " µs"
	}
	return strconv.FormatInt(ns, 10) + " ns"
}

// Positions the plot template needs (templates cannot add).
func (p *plot) Bottom() float64     { return p.T + p.IH }
func (p *plot) Right() float64      { return p.L + p.IW }
func (p *plot) LabelX() float64     { return p.L - 6 }
func (p *plot) TickEnd() float64    { return p.T + p.IH + 4 }
func (p *plot) TickLabelY() float64 { return p.T + p.IH + 16 }

// threeDigits rounds to three significant digits (1.18, 11.8, 118): enough
// to compare latencies, short enough to scan a column.
func threeDigits(v float64) string {
	switch {
	case v >= 100:
		return trimFloat(math.Round(v))
	case v >= 10:
		return trimFloat(math.Round(v*10) / 10)
	}
	return trimFloat(math.Round(v*100) / 100)
}
