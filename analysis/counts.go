package analysis

import (
	"slices"
	"strings"

	"github.com/fencecheck/fencecheck/history"
)

// Counts are the sizes of the history.
type Counts struct {
	Events int `json:"events"`
	// Ops counts client operations; Definite those that ended ok or fail.
	Ops      int `json:"ops"`
	Definite int `json:"definite_ops"`
	// Keys counts the distinct keys (resources and locks) of client events,
	// Processes the distinct client processes.
	Keys      int `json:"keys"`
	Processes int `json:"processes"`
	// ByOp counts operations by f and outcome ("ok", "fail", "info").
	ByOp map[string]map[string]int `json:"by_op"`
	// TamperedWrites counts writes whose token the strip proxy changed.
	TamperedWrites int `json:"tampered_writes,omitempty"`
	// Faults counts the fault periods and markers.
	Faults int `json:"faults"`
}

// NemesisCount is how often a nemesis acted, from its events.
type NemesisCount struct {
	Started int `json:"started"`
	// Failed counts tries that failed to start (error events), LastError
	// the last one's error.
	Failed    int    `json:"failed,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

func (a *analyzer) count(ops []*history.Op) Counts {
	c := Counts{Events: a.events, Ops: len(ops), Keys: len(a.keys), Processes: len(a.procs),
		ByOp: map[string]map[string]int{}, TamperedWrites: a.tampered}
	for _, o := range ops {
		if o.Outcome != history.OutcomeInfo {
			c.Definite++
		}
		m := c.ByOp[o.F]
		if m == nil {
			m = map[string]int{}
			c.ByOp[o.F] = m
		}
		m[o.Outcome.String()]++
	}
	return c
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

// latencies computes quantiles per operation and outcome over the operations
// that completed ok or fail.
func latencies(ops []*history.Op) []Latency {
	groups := map[[2]string][]int64{}
	for _, o := range ops {
		if o.Outcome == history.OutcomeInfo || o.Completed == history.Never {
			continue
		}
		k := [2]string{o.F, o.Outcome.String()}
		groups[k] = append(groups[k], o.Completed-o.Call)
	}
	var out []Latency
	for k, ds := range groups {
		slices.Sort(ds)
		out = append(out, Latency{F: k[0], Outcome: k[1], Count: len(ds),
			P50: quantile(ds, 0.5), P90: quantile(ds, 0.9), P99: quantile(ds, 0.99), Max: ds[len(ds)-1]})
	}
	slices.SortFunc(out, func(x, y Latency) int {
		if c := OpOrder(x.F) - OpOrder(y.F); c != 0 {
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
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// OpOrder sorts operations the way a user reads them: the lock's life, then
// the resource.
func OpOrder(f string) int {
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
