package reports

import (
	"hash/fnv"
	"slices"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
)

// nemesisColor is each nemesis's colour, fixed, so a partition has the same
// colour in every report: blues, violets, cyans and greys, far from the
// outcome colours (ok green, fail red, info amber, the violation mark's
// dark red). The order is the timeline's fault lanes' order.
var nemesisColor = []struct{ name, color string }{
	{"restart", "#1971c2"},
	{"restart-wipe", "#0b3d91"},
	{"power-loss", "#6741d9"},
	{"partition", "#0c8599"},
	{"pause", "#ae3ec9"},
	{"clock", "#495057"},
	{"delay", "#4dabf7"},
	{"strip", "#9775fa"},
	{"heal", "#212529"},
}

// otherNemesisColors colour a nemesis the table does not know, by a hash of
// its name: the same in every run.
var otherNemesisColors = []string{"#3b5bdb", "#15aabf", "#845ef7", "#5c7cfa", "#868e96", "#1098ad", "#7048e8"}

func colorOf(nemesis string) string {
	for _, c := range nemesisColor {
		if c.name == nemesis {
			return c.color
		}
	}
	h := fnv.New32a()
	h.Write([]byte(nemesis))
	return otherNemesisColors[h.Sum32()%uint32(len(otherNemesisColors))]
}

// laneRank orders the fault lanes: the table's order, then others by name.
func laneRank(nemesis string) int {
	for i, c := range nemesisColor {
		if c.name == nemesis {
			return i
		}
	}
	return len(nemesisColor)
}

// faultColors gives each nemesis of faults its colour, and lists them in
// lane order: the timeline's fault lanes, the legend.
func faultColors(faults []analysis.Fault) (map[string]string, []string) {
	colors := map[string]string{}
	var order []string
	for _, f := range faults {
		if _, ok := colors[f.Nemesis]; !ok {
			colors[f.Nemesis] = colorOf(f.Nemesis)
			order = append(order, f.Nemesis)
		}
	}
	slices.SortStableFunc(order, func(a, b string) int {
		if d := laneRank(a) - laneRank(b); d != 0 {
			return d
		}
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
		return 0
	})
	return colors, order
}

// phaseFacts is the header's account of the run's length: the main phase,
// then the final phase and what the run spent outside the history (setup:
// image builds, starting the target, health waits; teardown) apart ("ran
// 70 s" for a 30 s run counted image builds), from the run events; "" for
// a history without them.
func phaseFacts(an *analysis.Result, total time.Duration) string {
	before, main, after := an.Run.PhaseLengths(an.End)
	if main < 0 {
		return ""
	}
	s := "main phase " + seconds(main)
	if after >= 0 {
		s += " · final phase " + seconds(after)
	}
	if rest := int64(total) - main - max(after, 0); total > 0 && rest >= 0 {
		s += " · setup and teardown " + seconds(rest)
	} else if before > 0 {
		s += " · setup " + seconds(before)
	}
	return s
}
