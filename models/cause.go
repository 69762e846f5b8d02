package models

import "fmt"

// NameCauses appends to each violation the fault event (a start, or an end:
// a node coming back from a restart) that came last before the history
// showed it ("0.09 s after the restart of redis-1 (14.00–15.00 s) ended"),
// so a reader sees at once which fault exposed the bug. It names the fault,
// it does not prove causation: the words say "after", not "because". The
// faults are those AnnotateFaults (or Check) found.
func (r *Report) NameCauses() {
	for i := range r.Results {
		for j := range r.Results[i].Anomalies {
			a := &r.Results[i].Anomalies[j]
			if a.Finding || a.At <= 0 {
				continue
			}
			if cause := r.faultBefore(a.At); cause != "" {
				a.Text += " — " + cause
			}
		}
	}
}

// faultBefore says which fault event came last at or before t, in words.
func (r *Report) faultBefore(t int64) string {
	var last *faultPeriod
	lastAt, ended := int64(-1), false
	for k := range r.faults {
		p := &r.faults[k]
		if p.stopped && p.end <= t && p.end >= lastAt {
			last, lastAt, ended = p, p.end, true
		}
		if p.start <= t && p.start > lastAt {
			last, lastAt, ended = p, p.start, false
		}
	}
	if last == nil {
		return ""
	}
	what := last.name
	if last.mode != "" {
		what += " (" + last.mode + ")"
	}
	if last.detail != "" {
		what += " of " + last.detail
	}
	if ended {
		return fmt.Sprintf("%.2f s after the %s (%.2f–%.2f s) ended", float64(t-lastAt)/1e9, what, float64(last.start)/1e9, float64(last.end)/1e9)
	}
	return fmt.Sprintf("%.2f s after the %s that began at %.2f s", float64(t-lastAt)/1e9, what, float64(last.start)/1e9)
}
