package reports

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/fencecheck/fencecheck/history"
)

// maxNotes bounds the warnings kept about a damaged history: a file with a
// million bad lines must not produce a million-line report.
const maxNotes = 20

// Fault is one nemesis period: a start event paired with its stop. A fault
// with no stop lasted to the end of the history (Open); a stop with no start
// (e.g. the final "heal") is a zero-length marker.
type Fault struct {
	Nemesis string `json:"nemesis"`
	Start   int64  `json:"start_ns"`
	Stop    int64  `json:"stop_ns"`
	// Open: the history ended before this fault's stop event.
	Open bool   `json:"open,omitempty"`
	Node string `json:"node,omitempty"`
	// Details are the start event's extra fields other than action and id.
	Details map[string]json.RawMessage `json:"details,omitempty"`
}

// Label is the fault in a few words, e.g. "pause n1 (duration=5s)".
func (f Fault) Label() string {
	var b strings.Builder
	b.WriteString(f.Nemesis)
	if f.Node != "" {
		b.WriteString(" ")
		b.WriteString(f.Node)
	}
	if len(f.Details) > 0 {
		keys := make([]string, 0, len(f.Details))
		for k := range f.Details {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(" (")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k)
			b.WriteString("=")
			v := string(f.Details[k])
			if s := rawString(f.Details[k]); s != "" {
				v = s
			}
			b.WriteString(v)
		}
		b.WriteString(")")
	}
	return clip(b.String(), 160)
}

// op is one client operation reduced to what the report draws.
type op struct {
	ID      int64
	Process int
	Lane    int
	F       string
	Key     string
	Outcome history.Outcome
	Call    int64
	// End is when the operation's bar ends: its completion (also for info),
	// or the end of the history when it never completed.
	End      int64
	Done     bool // a completion event was seen
	Token    string
	Value    string
	Error    string
	HW       string
	Tampered string
	Node     string
}

// Latency is how long completed operations of one kind took. Info operations
// have no latency (their effect may come at any time) and are only counted.
type Latency struct {
	F       string `json:"f"`
	Outcome string `json:"outcome"`
	Count   int    `json:"count"`
	P50     int64  `json:"p50_ns"`
	P90     int64  `json:"p90_ns"`
	P99     int64  `json:"p99_ns"`
	Max     int64  `json:"max_ns"`
}

// analysis is everything the report derives from a history.
type analysis struct {
	End          int64 // time of the last event (ns)
	Events       int
	ClientEvents int
	Ops          []op // by call time
	Lanes        [][]int
	Faults       []Fault
	// Tampered counts writes whose token the strip proxy changed.
	Tampered int
	Keys     []string
	Counts   map[string]map[string]int // f -> outcome -> n
	Notes    []string
	byID     map[int64]int // op ID -> index in Ops
}

// analyzeFile streams a history file. A damaged line is noted and skipped,
// not fatal: the report of a crashed run is exactly when it is needed most.
func analyzeFile(path string) (*analysis, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return analyze(history.NewReader(f))
}

// eventSource is what analyze reads: a history.Reader, or a slice.
type eventSource interface {
	Next() (history.Event, error)
}

type sliceSource struct {
	events []history.Event
	i      int
}

func (s *sliceSource) Next() (history.Event, error) {
	if s.i >= len(s.events) {
		return history.Event{}, io.EOF
	}
	s.i++
	return s.events[s.i-1], nil
}

func analyze(src eventSource) (*analysis, error) {
	a := &analysis{Counts: map[string]map[string]int{}, byID: map[int64]int{}}
	p := history.NewPairer()
	var ops []*history.Op
	var nemesis []history.Event
	keys := map[string]bool{}
	badLines := 0
	for {
		e, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *history.ParseError
			if !errors.As(err, &pe) {
				return nil, err // an I/O error: the file itself is unreadable
			}
			badLines++
			a.note(fmt.Sprintf("skipped damaged %v", err))
			continue
		}
		a.Events++
		if e.Time > a.End {
			a.End = e.Time
		}
		if e.IsClient() {
			a.ClientEvents++
			keys[e.Key] = true
		} else if e.Process == history.NemesisProcess && !e.IsRun() {
			if e.IsTamper() {
				a.Tampered++
			} else {
				nemesis = append(nemesis, e)
			}
		}
		o, err := p.Add(e)
		if err != nil {
			a.note(err.Error())
			continue
		}
		if o != nil {
			ops = append(ops, o)
		}
	}
	if r, ok := src.(*history.Reader); ok && r.Truncated {
		a.note(fmt.Sprintf("skipped the last line (%d): it was cut short, as by a crash while it was written", r.Line()))
	}
	if badLines > maxNotes {
		a.Notes = append(a.Notes, fmt.Sprintf("%d damaged lines in all", badLines))
	}
	ops = append(ops, p.Finish()...)
	a.Keys = make([]string, 0, len(keys))
	for k := range keys {
		a.Keys = append(a.Keys, k)
	}
	sort.Strings(a.Keys)

	a.Ops = make([]op, len(ops))
	for i, o := range ops {
		r := op{ID: o.ID, Process: o.Process, F: o.F, Key: o.Key, Outcome: o.Outcome,
			Call: o.Call, End: o.Completed, Done: o.Completed != history.Never,
			Error: o.Error, HW: o.HighWater, Tampered: o.Tampered, Node: o.Node, Value: o.Value}
		if !r.Done {
			r.End = a.End
		}
		if o.Token.State != history.TokenNone {
			r.Token = o.Token.Raw
		}
		a.Ops[i] = r
		a.count(r.F, r.Outcome.String())
	}
	slices.SortFunc(a.Ops, func(x, y op) int {
		if x.Call != y.Call {
			return cmpInt(x.Call, y.Call)
		}
		return cmpInt(x.ID, y.ID)
	})
	for i := range a.Ops {
		a.byID[a.Ops[i].ID] = i
	}
	a.assignLanes()
	a.Faults = pairFaults(nemesis, a.End)
	return a, nil
}

func (a *analysis) note(s string) {
	if len(a.Notes) < maxNotes {
		a.Notes = append(a.Notes, clip(s, 300))
	}
}

func (a *analysis) count(f, outcome string) {
	m := a.Counts[f]
	if m == nil {
		m = map[string]int{}
		a.Counts[f] = m
	}
	m[outcome]++
}

// assignLanes gives every process a row of the timeline. A client that saw
// info continues under a new process number, so drawing one row per process
// would give thousands of rows; instead a process reuses the first row whose
// previous process has finished, which keeps the rows close to the number of
// concurrent clients.
func (a *analysis) assignLanes() {
	type span struct {
		proc       int
		first, end int64
	}
	spans := map[int]*span{}
	var order []*span
	for _, o := range a.Ops {
		s := spans[o.Process]
		if s == nil {
			s = &span{proc: o.Process, first: o.Call, end: o.End}
			spans[o.Process] = s
			order = append(order, s)
		}
		if o.End > s.end {
			s.end = o.End
		}
	}
	// order is by first call already (ops are sorted by call).
	free := &laneHeap{}
	laneOf := map[int]int{}
	for _, s := range order {
		lane := -1
		if free.Len() > 0 && (*free)[0].end < s.first {
			lane = heap.Pop(free).(laneEnd).lane
		} else {
			lane = len(a.Lanes)
			a.Lanes = append(a.Lanes, nil)
		}
		a.Lanes[lane] = append(a.Lanes[lane], s.proc)
		laneOf[s.proc] = lane
		heap.Push(free, laneEnd{lane: lane, end: s.end})
	}
	for i := range a.Ops {
		a.Ops[i].Lane = laneOf[a.Ops[i].Process]
	}
}

type laneEnd struct {
	lane int
	end  int64
}

// laneHeap orders rows by when they become free, then by row number so the
// layout is deterministic.
type laneHeap []laneEnd

func (h laneHeap) Len() int { return len(h) }
func (h laneHeap) Less(i, j int) bool {
	if h[i].end != h[j].end {
		return h[i].end < h[j].end
	}
	return h[i].lane < h[j].lane
}
func (h laneHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *laneHeap) Push(x any)   { *h = append(*h, x.(laneEnd)) }
func (h *laneHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// pairFaults turns nemesis start/stop events into periods. A stop closes the
// open start with the same nemesis and extra.id; without ids, the oldest open
// start of that nemesis (first in, first out).
func pairFaults(events []history.Event, end int64) []Fault {
	var out []Fault
	open := map[string][]int{} // pairing key -> indices into out, oldest first
	for _, e := range events {
		action := rawString(e.Extra["action"])
		id := string(e.Extra["id"])
		key := e.F + "\x00" + id
		switch action {
		case "start":
			f := Fault{Nemesis: sanitize(e.F), Start: e.Time, Stop: end, Open: true, Node: sanitize(e.Node), Details: details(e.Extra)}
			out = append(out, f)
			open[key] = append(open[key], len(out)-1)
		case "stop":
			q := open[key]
			if len(q) == 0 && id != "" {
				// A stop that names an id nobody started: fall back to the
				// nemesis's oldest open start rather than lose the period.
				for k, v := range open {
					if strings.HasPrefix(k, e.F+"\x00") && len(v) > 0 && (len(q) == 0 || v[0] < q[0]) {
						key, q = k, v
					}
				}
			}
			if len(q) == 0 {
				out = append(out, Fault{Nemesis: sanitize(e.F), Start: e.Time, Stop: e.Time, Node: sanitize(e.Node), Details: details(e.Extra)})
				continue
			}
			i := q[0]
			open[key] = q[1:]
			out[i].Stop = e.Time
			out[i].Open = false
		default:
			// A one-shot event (no action): an instant marker.
			out = append(out, Fault{Nemesis: sanitize(e.F), Start: e.Time, Stop: e.Time, Node: sanitize(e.Node), Details: details(e.Extra)})
		}
	}
	slices.SortStableFunc(out, func(x, y Fault) int { return cmpInt(x.Start, y.Start) })
	return out
}

func details(extra map[string]json.RawMessage) map[string]json.RawMessage {
	var d map[string]json.RawMessage
	for k, v := range extra {
		if k == "action" || k == "id" {
			continue
		}
		if d == nil {
			d = map[string]json.RawMessage{}
		}
		d[sanitize(k)] = v
	}
	return d
}

func rawString(b json.RawMessage) string {
	var s string
	if json.Unmarshal(b, &s) != nil {
		return ""
	}
	return s
}

// latencies computes quantiles per operation and outcome over ops that
// completed with ok or fail.
func (a *analysis) latencies() []Latency {
	groups := map[[2]string][]int64{}
	for _, o := range a.Ops {
		if !o.Done || o.Outcome == history.OutcomeInfo {
			continue
		}
		k := [2]string{o.F, o.Outcome.String()}
		groups[k] = append(groups[k], o.End-o.Call)
	}
	var out []Latency
	for k, ds := range groups {
		slices.Sort(ds)
		out = append(out, Latency{F: k[0], Outcome: k[1], Count: len(ds),
			P50: quantile(ds, 0.5), P90: quantile(ds, 0.9), P99: quantile(ds, 0.99), Max: ds[len(ds)-1]})
	}
	slices.SortFunc(out, func(x, y Latency) int {
		if c := cmpInt(int64(fOrder(x.F)), int64(fOrder(y.F))); c != 0 {
			return c
		}
		return strings.Compare(x.Outcome, y.Outcome)
	})
	return out
}

// quantile of sorted values, nearest-rank.
func quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// fOrder sorts operations the way a user reads them: the lock's life, then
// the resource.
func fOrder(f string) int {
	switch f {
	case history.Acquire:
		return 0
	case history.Renew:
		return 1
	case history.Release:
		return 2
	case history.Write:
		return 3
	case history.Read:
		return 4
	}
	return 5
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sanitize makes a string from the system under test safe to carry: invalid
// UTF-8 becomes U+FFFD (html/template, encoding/json and encoding/xml then
// escape the rest).
func sanitize(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// clip sanitizes s and shortens it to at most n runes, marking the cut.
func clip(s string, n int) string {
	s = sanitize(s)
	if len(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}
