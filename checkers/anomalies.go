package checkers

import (
	"sort"
	"strconv"

	"github.com/fencecheck/fencecheck/history"
)

// Secs renders a history time (ns) the way anomaly texts show it: "12.41 s".
func Secs(ns int64) string {
	if ns == history.Never {
		return "never"
	}
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 2, 64) + " s"
}

// MaxAnomaliesPerKind bounds how many anomalies of one kind a Result lists
// (the earliest ones); KindCounts still counts them all. A broken target can
// produce one anomaly per operation, and a report of a million lines helps
// no one.
var MaxAnomaliesPerKind = 20

// CapAnomalies sorts r's anomalies by time and keeps the first perKind of
// each kind, counting all of them in r.KindCounts and keeping each in brief
// in r.Found.
func CapAnomalies(r *Result, perKind int) {
	SortAnomalies(r.Anomalies)
	if len(r.Anomalies) == 0 {
		return
	}
	if r.KindCounts == nil {
		r.KindCounts = map[string]int{}
	}
	r.Found = make([]Brief, 0, len(r.Anomalies))
	for _, a := range r.Anomalies {
		model := a.Model
		if model == "" {
			model = r.Model
		}
		r.Found = append(r.Found, Brief{Kind: a.Kind, Model: model, Key: a.Key, Ops: a.Ops, At: a.At})
	}
	kept := r.Anomalies[:0]
	for _, a := range r.Anomalies {
		r.KindCounts[a.Kind]++
		if r.KindCounts[a.Kind] <= perKind {
			kept = append(kept, a)
		} else {
			r.OmittedAnomalies++
		}
	}
	r.Anomalies = kept
}

// SortAnomalies orders anomalies earliest first, deterministically.
func SortAnomalies(as []Anomaly) {
	sort.SliceStable(as, func(i, j int) bool {
		if as[i].At != as[j].At {
			return as[i].At < as[j].At
		}
		if as[i].Kind != as[j].Kind {
			return as[i].Kind < as[j].Kind
		}
		if as[i].Key != as[j].Key {
			return as[i].Key < as[j].Key
		}
		return len(as[i].Ops) > 0 && len(as[j].Ops) > 0 && as[i].Ops[0] < as[j].Ops[0]
	})
}

// HasViolation reports whether any anomaly is a violation (not a finding).
func HasViolation(as []Anomaly) bool {
	for _, a := range as {
		if !a.Finding {
			return true
		}
	}
	return false
}
