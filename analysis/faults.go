package analysis

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/history"
)

// Fault is one nemesis period: a start event paired with its stop. A fault
// with no stop lasted to the end of the history (Open); a stop with no start
// (e.g. the final "heal") and an event with no action are zero-length
// markers (Instant).
type Fault struct {
	Nemesis string `json:"nemesis"`
	Start   int64  `json:"start_ns"`
	Stop    int64  `json:"stop_ns"`
	// Open: the history ended before this fault's stop event.
	Open bool `json:"open,omitempty"`
	// Node names the nodes the fault acted on (comma separated).
	Node string `json:"node,omitempty"`
	// Details are the start event's extra fields other than action and id.
	Details map[string]json.RawMessage `json:"details,omitempty"`
}

// Instant reports whether f is a marker, not a period.
func (f Fault) Instant() bool { return !f.Open && f.Start == f.Stop }

// Mode is the fault's extra.mode ("holder", "step", ...), if any.
func (f Fault) Mode() string { return rawString(f.Details[history.ExtraMode]) }

// on reports whether the fault acted on any of nodes.
func (f Fault) on(nodes map[string]bool) bool {
	for _, n := range strings.Split(f.Node, ",") {
		if nodes[strings.TrimSpace(n)] {
			return true
		}
	}
	return false
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
			v := plainJSON(f.Details[k])
			if s := rawString(f.Details[k]); s != "" {
				v = s
			}
			b.WriteString(v)
		}
		b.WriteString(")")
	}
	return b.String()
}

// what names the fault in a sentence: "the pause (holder) of client"; a
// partition by its sides, "the partition (issuers) {issuer-1} | {issuer-2,
// etcd-1}", as its start event's groups say; a one-way cut with an arrow
// from the side that cannot reach, "{issuer-2} -/-> {issuer-1}".
func (f Fault) what() string {
	s := "the " + f.Nemesis
	if m := f.Mode(); m != "" {
		s += " (" + m + ")"
	}
	if sides := f.Sides(); len(sides) > 1 {
		parts := make([]string, len(sides))
		for i, g := range sides {
			parts[i] = "{" + strings.Join(g, ", ") + "}"
		}
		sep := " | "
		if string(bytes.TrimSpace(f.Details["one_way"])) == "true" {
			sep = " -/-> "
		}
		return s + " " + strings.Join(parts, sep)
	}
	if f.Node != "" {
		s += " of " + f.Node
	}
	return s
}

// Sides are a partition's groups (extra.groups of its start event: nodes
// in one group reach each other, not the others); nil for other faults.
func (f Fault) Sides() [][]string {
	raw, ok := f.Details["groups"]
	if !ok {
		return nil
	}
	var g [][]string
	if json.Unmarshal(raw, &g) != nil {
		return nil
	}
	return g
}

// faultPairer pairs nemesis start and stop events as they stream by, the one
// place faults are paired. A stop closes the open start with the same
// nemesis and extra.id (the scheduler numbers each fault); without ids, or
// when the id matches no open start, the oldest open start of that nemesis
// (first in, first out).
type faultPairer struct {
	out  []Fault
	open map[string][]int // nemesis \x00 id -> indices into out, oldest first
}

// add takes a nemesis event (not a run or tamper event). It reports false
// for events that are not fault periods (a nemesis that failed to start).
func (p *faultPairer) add(e history.Event) bool {
	if p.open == nil {
		p.open = map[string][]int{}
	}
	action := rawString(e.Extra[history.ExtraAction])
	id := string(e.Extra[history.ExtraFaultID])
	key := e.F + "\x00" + id
	marker := Fault{Nemesis: e.F, Start: e.Time, Stop: e.Time, Node: e.Node, Details: details(e.Extra)}
	switch action {
	case history.FaultStart:
		f := marker
		f.Open = true
		p.out = append(p.out, f)
		p.open[key] = append(p.open[key], len(p.out)-1)
	case history.FaultStop:
		q := p.open[key]
		if len(q) == 0 {
			for k, v := range p.open {
				if strings.HasPrefix(k, e.F+"\x00") && len(v) > 0 && (len(q) == 0 || v[0] < q[0]) {
					key, q = k, v
				}
			}
		}
		if len(q) == 0 {
			p.out = append(p.out, marker)
			return true
		}
		p.open[key] = q[1:]
		p.out[q[0]].Stop, p.out[q[0]].Open = e.Time, false
	case history.FaultError, history.FaultStopFailed:
		return false
	default:
		// A one-shot event: an instant marker.
		p.out = append(p.out, marker)
	}
	return true
}

// periods closes the faults still open at the history's end.
func (p *faultPairer) periods(end int64) []Fault {
	out := append([]Fault(nil), p.out...)
	for i := range out {
		if out[i].Open {
			out[i].Stop = max(end, out[i].Start)
		}
	}
	slices.SortStableFunc(out, func(x, y Fault) int {
		switch {
		case x.Start < y.Start:
			return -1
		case x.Start > y.Start:
			return 1
		}
		return 0
	})
	return out
}

func details(extra map[string]json.RawMessage) map[string]json.RawMessage {
	var d map[string]json.RawMessage
	for k, v := range extra {
		if k == history.ExtraAction || k == history.ExtraFaultID {
			continue
		}
		if d == nil {
			d = map[string]json.RawMessage{}
		}
		d[k] = v
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

// plainJSON is b without HTML escapes (\u003e for '>' and the like, as
// json.Marshal writes them): the words a user reads, e.g. in a fault's
// details on the report page.
func plainJSON(b json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return string(b)
	}
	var out strings.Builder
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return string(b)
	}
	return strings.TrimSuffix(out.String(), "\n")
}

func extraString(extra map[string]json.RawMessage, k string) string { return rawString(extra[k]) }
