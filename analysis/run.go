package analysis

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/fencecheck/fencecheck/history"
)

// RunRecord is what a history's run events (history/run.go) say about the
// run that recorded it: what it set out to do and how far it got.
type RunRecord struct {
	// Requested is the nemesis list as asked for ("all", "pause,restart",
	// "none"); Nemeses those that acted; NotApplicable each requested one
	// that could not act on the target, with why.
	Requested     string            `json:"requested,omitempty"`
	Nemeses       []string          `json:"nemeses,omitempty"`
	NotApplicable map[string]string `json:"not_applicable,omitempty"`
	// Phases are the phases begun, in order ("main", "final").
	Phases []string `json:"phases,omitempty"`
	// Problems went wrong without stopping the run (a recovery that timed
	// out), in words.
	Problems []string `json:"problems,omitempty"`
	// Ended: the history has the end event. Complete: heal, recovery and
	// final reads all succeeded. CutShort: the run was interrupted.
	Ended    bool `json:"ended"`
	Complete bool `json:"complete"`
	CutShort bool `json:"cut_short,omitempty"`
	// Waited counts, per nemesis, the tries that found every node it could
	// act on held by another fault (end event's extra.waited, if recorded).
	Waited map[string]int `json:"waited,omitempty"`
	// MainAt and FinalAt are when the main and final phases began (history
	// time; -1: not begun): the page's header shows the main phase's length
	// apart from setup (image builds, health waits) and the final phase.
	MainAt  int64 `json:"main_at_ns"`
	FinalAt int64 `json:"final_at_ns"`
}

// Phases' lengths: setup (until the main phase), main, and after it
// (heal, recovery, final reads), given the history's end; -1 for a phase
// the history does not bound.
func (r *RunRecord) PhaseLengths(end int64) (setup, main, after int64) {
	if r == nil || r.MainAt < 0 {
		return -1, -1, -1
	}
	if r.FinalAt < 0 {
		return r.MainAt, end - r.MainAt, -1
	}
	return r.MainAt, r.FinalAt - r.MainAt, end - r.FinalAt
}

// runReader collects the run events of one history.
type runReader struct {
	seen bool
	rec  RunRecord
	// mainAt and finalAt are the times the main and final phases began
	// (-1: not begun).
	mainAt, finalAt int64
	// nodes are the target's nodes as the start event lists them (nil: not
	// listed, an older history); coverage reads them.
	nodes []history.RunNode
}

// inMain reports whether time t is in the main phase, as far as the
// history has told so far.
func (r *runReader) inMain(t int64) bool {
	return r.mainAt >= 0 && t >= r.mainAt && (r.finalAt < 0 || t < r.finalAt)
}

func (r *runReader) add(e history.Event) {
	r.seen = true
	x := e.Extra
	switch extraString(x, history.RunExtraAction) {
	case history.RunStart:
		r.rec.Requested = extraString(x, history.RunExtraRequested)
		_ = json.Unmarshal(x[history.RunExtraNemeses], &r.rec.Nemeses)
		_ = json.Unmarshal(x[history.RunExtraNotApplicable], &r.rec.NotApplicable)
		_ = json.Unmarshal(x[history.RunExtraNodes], &r.nodes)
	case history.RunPhase:
		ph := extraString(x, history.RunExtraPhase)
		r.rec.Phases = append(r.rec.Phases, ph)
		switch {
		case ph == history.PhaseMain && r.mainAt < 0:
			r.mainAt = e.Time
		case ph == history.PhaseFinal && r.finalAt < 0:
			r.finalAt = e.Time
		}
	case history.RunProblem:
		p := extraString(x, history.RunExtraError)
		if ph := extraString(x, history.RunExtraPhase); ph != "" {
			p = ph + ": " + p
		}
		r.rec.Problems = append(r.rec.Problems, p)
	case history.RunEnd:
		r.rec.Ended = true
		_ = json.Unmarshal(x[history.RunExtraComplete], &r.rec.Complete)
		_ = json.Unmarshal(x[history.RunExtraCutShort], &r.rec.CutShort)
		_ = json.Unmarshal(x[history.RunExtraWaited], &r.rec.Waited)
	}
}

// record is the run record, or nil when the history had no run event.
func (r *runReader) record() *RunRecord {
	if !r.seen {
		return nil
	}
	rec := r.rec
	rec.MainAt, rec.FinalAt = r.mainAt, r.finalAt
	return &rec
}

// Notes are what the reader of the report must know about the run itself
// (nil for a nil record).
func (r *RunRecord) Notes() []string {
	if r == nil {
		return nil
	}
	var out []string
	var na []string
	for n, why := range r.NotApplicable {
		na = append(na, fmt.Sprintf("nemesis %s not applicable: %s", n, why))
	}
	sort.Strings(na)
	out = append(out, na...)
	for _, p := range r.Problems {
		out = append(out, "problem during the run: "+p)
	}
	return out
}

// Completion says in words how far the run got: whether the final heal and
// reads were done ("" for a nil record: a history without run events).
// The summary and the report show it beside the verdict.
func (r *RunRecord) Completion() string {
	switch {
	case r == nil:
		return ""
	case !r.Ended && slices.Contains(r.Phases, history.PhaseFinal):
		return "did not finish: its final phase (heal, recovery, final reads) began but never ended (the harness was killed or aborted)"
	case !r.Ended:
		return "did not finish: the final heal and reads never happened (the harness was killed or aborted, or the run is still going)"
	case r.CutShort && r.Complete:
		return "cut short (interrupted): the main phase ended early; the final heal and reads were done"
	case r.CutShort:
		return "cut short (interrupted), and its final phase failed (heal, recovery or final reads)"
	case !r.Complete:
		return "did not complete: its final phase failed (heal, recovery or final reads)"
	}
	return "completed: the final heal and reads were done"
}
