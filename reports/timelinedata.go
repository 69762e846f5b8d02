package reports

import (
	"fmt"
	"slices"
	"sort"

	"github.com/fencecheck/fencecheck/history"
)

// The timeline at any size. Up to timelineDetailOps operations the page
// embeds every one. Past that it embeds a density view of the whole run
// (how many operations each row called in each time bucket, by outcome)
// and, at full detail, every operation in the windows around the
// violations (and every operation an anomaly names). Past
// timelineMaxRows rows (one row per concurrent client) the rows are
// grouped, so 100 or 1,000 clients still fit on a screen.
var (
	// timelineDetailOps: operations embedded one by one (a variable so the
	// tests can reach density mode with small histories).
	timelineDetailOps = 250_000
	// timelineMaxRows: client rows shown before they are grouped.
	timelineMaxRows = 60
)

// densityBuckets is the density view's time resolution: about one bucket
// per pixel of a wide screen.
const densityBuckets = 1500

// timelineJS is the timeline's data: columns, not objects, with call times
// delta-encoded in microseconds, so 100k operations cost about 40 bytes each.
type timelineJS struct {
	End  int64 `json:"end"`  // ns
	Unit int64 `json:"unit"` // ns per unit of c and d
	// Lanes label the rows; Row maps each lane (a process's row) to the
	// row it is drawn in (itself unless the lanes are grouped).
	Lanes  []string  `json:"lanes"`
	Row    []int     `json:"row"`
	Fs     []string  `json:"fs"`
	Keys   []string  `json:"keys"`
	ID     []int64   `json:"id"` // delta-encoded invoke index
	Lane   []int     `json:"lane"`
	P      []int     `json:"p"`
	C      []int64   `json:"c"` // delta-encoded call time
	D      []int64   `json:"d"` // duration; -1: never completed
	F      []int     `json:"f"`
	K      []int     `json:"k"`
	O      []int     `json:"o"` // 0 ok, 1 fail, 2 info
	Tok    []string  `json:"tok"`
	Val    []string  `json:"val"`
	Err    []string  `json:"err"`
	Faults []faultJS `json:"faults"`
	// FaultLanes name the lanes above the clients' rows, one per nemesis.
	FaultLanes []string `json:"flanes"`
	Anom       []anomJS `json:"anom"` // the violations listed on the page
	// Dens is the density view (nil: every operation is embedded).
	Dens *densityJS `json:"dens,omitempty"`
	// Win are the time windows ([start, end] ns) whose operations are all
	// embedded, in density mode.
	Win [][2]int64 `json:"win"`
}

// densityJS counts the operations called in each row and time bucket, by
// outcome; cell (row r, bucket b) is at r*B+b of each column.
type densityJS struct {
	B    int     `json:"b"`
	Ok   []int32 `json:"ok"`
	Fail []int32 `json:"fail"`
	// Info counts the operations whose outcome is unknown (info, or never
	// completed).
	Info []int32 `json:"info"`
}

type anomJS struct {
	Kind string  `json:"k"`
	At   int64   `json:"at"`
	Ops  []int64 `json:"ops"`
}

type faultJS struct {
	Nemesis string `json:"n"`
	Start   int64  `json:"s"`
	Stop    int64  `json:"e"`
	Open    bool   `json:"open,omitempty"`
	Label   string `json:"l"`
	Color   string `json:"c"`
	// Lane is the fault lane (timelineJS.FaultLanes) of its nemesis.
	Lane int `json:"ln"`
}

const timelineUnit = 1000 // µs

// timelineRows maps each lane to its drawn row and labels the rows: one
// row per lane up to timelineMaxRows, else lanes grouped evenly.
func timelineRows(v *opsView) (rowOf []int, labels []string) {
	n := len(v.lanes)
	rows := min(n, timelineMaxRows)
	rowOf = make([]int, n)
	first := make([]int, rows)
	count := make([]int, rows)
	procs := make([]int, rows)
	for l := range v.lanes {
		r := l * rows / n
		rowOf[l] = r
		if count[r] == 0 {
			first[r] = l
		}
		count[r]++
		procs[r] += len(v.lanes[l])
	}
	labels = make([]string, rows)
	for r := range labels {
		lane := v.lanes[first[r]]
		label := fmt.Sprintf("p%d", lane[0])
		switch {
		case count[r] > 1:
			label = fmt.Sprintf("p%d ×%d", lane[0], count[r])
		case len(lane) > 1:
			label += fmt.Sprintf(" +%d", len(lane)-1)
		}
		labels[r] = label
	}
	return rowOf, labels
}

// detailWindows picks, around each violation mark, the widest window (the
// same half-width for all, from 2 s down) whose operations, with the ones
// the anomalies name, fit in budget; it returns the merged windows. The
// operations are sorted by call.
func detailWindows(v *opsView, marks []anomJS, budget int) [][2]int64 {
	if len(marks) == 0 || budget <= 0 {
		return nil
	}
	at := make([]int64, 0, len(marks))
	for _, m := range marks {
		at = append(at, m.At)
	}
	slices.Sort(at)
	calls := func(t int64) int { // operations called before t
		return sort.Search(len(v.ops), func(i int) bool { return v.call(i) >= t })
	}
	for half := int64(2e9); half >= 1e6; half /= 2 {
		var wins [][2]int64
		for _, a := range at {
			lo, hi := max(a-half, 0), a+half/4 // a violation shows after its cause
			if n := len(wins); n > 0 && lo <= wins[n-1][1] {
				wins[n-1][1] = max(wins[n-1][1], hi)
				continue
			}
			wins = append(wins, [2]int64{lo, hi})
		}
		total := 0
		for _, w := range wins {
			total += calls(w[1]+1) - calls(w[0])
		}
		if total <= budget {
			return wins
		}
	}
	return nil
}

func inWindows(wins [][2]int64, t int64) bool {
	i := sort.Search(len(wins), func(i int) bool { return wins[i][1] >= t })
	return i < len(wins) && wins[i][0] <= t
}

func timelineData(v *opsView, res *Results, colors map[string]string, marks []anomJS) (timelineJS, int) {
	// Every column is a JSON array, never null, even for an empty history.
	t := timelineJS{End: v.end, Unit: timelineUnit, Keys: make([]string, len(v.keys)), Lanes: []string{}, Row: []int{}, Fs: []string{},
		ID: []int64{}, Lane: []int{}, P: []int{}, C: []int64{}, D: []int64{}, F: []int{}, K: []int{}, O: []int{},
		Tok: []string{}, Val: []string{}, Err: []string{}, Faults: []faultJS{}, Anom: []anomJS{}, Win: [][2]int64{}}
	for i, k := range v.keys {
		t.Keys[i] = clip(k, timelineTextLimit)
	}
	if len(v.lanes) > 0 {
		t.Row, t.Lanes = timelineRows(v)
	}
	fIdx := map[string]int{}
	keep := func(int) bool { return true }
	if len(v.ops) > timelineDetailOps {
		named := map[int64]bool{}
		for _, c := range res.Checks {
			for _, an := range c.Anomalies {
				for _, id := range an.Ops {
					named[id] = true
				}
			}
		}
		if marks != nil {
			t.Win = detailWindows(v, marks, timelineDetailOps-min(len(named), timelineDetailOps/2))
		}
		keep = func(i int) bool { return named[v.brief(i).ID] || inWindows(t.Win, v.call(i)) }
		t.Dens = density(v, t.Row, len(t.Lanes))
	}
	var prevCall, prevID int64
	for i := range v.ops {
		if !keep(i) {
			continue
		}
		o := v.brief(i)
		fi, ok := fIdx[o.F]
		if !ok {
			fi = len(t.Fs)
			fIdx[o.F] = fi
			t.Fs = append(t.Fs, o.F)
		}
		call := o.Call / timelineUnit
		t.C = append(t.C, call-prevCall)
		prevCall = call
		t.ID = append(t.ID, o.ID-prevID)
		prevID = o.ID
		dur := int64(-1)
		if done(&o) {
			dur = max(o.Completed/timelineUnit-call, 0)
		}
		t.D = append(t.D, dur)
		t.Lane = append(t.Lane, int(v.ops[i].lane))
		t.P = append(t.P, o.Process)
		t.F = append(t.F, fi)
		t.K = append(t.K, o.key)
		t.O = append(t.O, int(o.Outcome))
		full := v.full(i)
		t.Tok = append(t.Tok, clip(full.Token.Raw, timelineTextLimit))
		t.Val = append(t.Val, clip(full.Value, timelineTextLimit))
		t.Err = append(t.Err, clip(full.Error, timelineTextLimit))
	}
	_, order := faultColors(res.Faults)
	lane := map[string]int{}
	t.FaultLanes = []string{}
	for i, n := range order {
		lane[n] = i
		t.FaultLanes = append(t.FaultLanes, clip(n, timelineTextLimit))
	}
	for _, f := range res.Faults {
		t.Faults = append(t.Faults, faultJS{Nemesis: clip(f.Nemesis, timelineTextLimit), Start: f.Start, Stop: f.Stop, Open: f.Open, Label: clip(f.Label(), 160), Color: colors[f.Nemesis], Lane: lane[f.Nemesis]})
	}
	if marks != nil {
		t.Anom = marks
	}
	return t, len(t.C)
}

// density counts every operation in its row and the bucket of its call.
func density(v *opsView, rowOf []int, rows int) *densityJS {
	d := &densityJS{B: densityBuckets, Ok: make([]int32, rows*densityBuckets), Fail: make([]int32, rows*densityBuckets), Info: make([]int32, rows*densityBuckets)}
	width := float64(max(v.end, 1)) / densityBuckets
	for i := range v.ops {
		o := v.brief(i)
		b := min(int(float64(o.Call)/width), densityBuckets-1)
		cell := rowOf[v.ops[i].lane]*densityBuckets + max(b, 0)
		switch {
		case !done(&o) || o.Outcome == history.OutcomeInfo:
			d.Info[cell]++
		case o.Outcome == history.OutcomeFail:
			d.Fail[cell]++
		default:
			d.Ok[cell]++
		}
	}
	return d
}
