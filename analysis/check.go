package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/nemesis"
)

// combine sets the checkers' verdict and its reason, by one rule:
//
//   - a violation listed by a checker whose violations are proofs (the
//     direct checks) makes the history invalid;
//   - otherwise the complete checkers of each model decide it: invalid when
//     one says invalid and none valid; unknown with both answers when they
//     disagree (a checker bug); unknown when none decided (a Porcupine
//     timeout with no fast checker);
//   - valid otherwise.
//
// The gate may then turn a valid verdict into unknown.
func (r *Result) combine() {
	find := func(model string) (proofs, complete []*checkers.Result) {
		for i := range r.Checks {
			c := &r.Checks[i]
			if c.Model != model {
				continue
			}
			if c.Proofs {
				proofs = append(proofs, c)
			}
			if c.Complete {
				complete = append(complete, c)
			}
		}
		return proofs, complete
	}
	decisive := func(c *checkers.Result) bool { return c.Verdict == checkers.Valid || c.Verdict == checkers.Invalid }

	var proven, invalid, unknown, disagree []string
	for _, m := range []string{checkers.ModelRegister, checkers.ModelIssuer} {
		proofs, complete := find(m)
		for _, p := range proofs {
			if p.Verdict == checkers.Invalid {
				proven = append(proven, fmt.Sprintf("%s: %s", m, kindSummary(p)))
			}
		}
		var answers []string
		verdicts := map[checkers.Verdict]bool{}
		for _, c := range complete {
			if decisive(c) {
				verdicts[c.Verdict] = true
				answers = append(answers, fmt.Sprintf("%s says %s", c.Checker, c.Verdict))
			}
		}
		switch {
		case len(verdicts) > 1:
			disagree = append(disagree, fmt.Sprintf("%s: %s", m, strings.Join(answers, ", ")))
		case verdicts[checkers.Invalid]:
			for _, c := range complete {
				if decisive(c) && !c.Proofs {
					invalid = append(invalid, fmt.Sprintf("%s: %s says invalid", m, c.Checker))
				}
			}
		case !verdicts[checkers.Valid]:
			for _, c := range complete {
				unknown = append(unknown, fmt.Sprintf("%s: %s: %s", m, c.Checker, c.Reason))
			}
			if len(complete) == 0 && len(proofs) > 0 {
				unknown = append(unknown, m+": no complete checker ran")
			}
		}
	}
	switch {
	case len(proven) > 0:
		r.Verdict = checkers.Invalid
		r.Reason = strings.Join(append(proven, invalid...), "; ")
		if len(disagree) > 0 {
			r.Reason += "; complete checkers disagree: " + strings.Join(disagree, "; ")
		}
	case len(disagree) > 0:
		r.Verdict = checkers.Unknown
		r.Reason = "complete checkers disagree (a checker bug; see both answers): " + strings.Join(disagree, "; ")
	case len(invalid) > 0:
		r.Verdict = checkers.Invalid
		r.Reason = strings.Join(invalid, "; ")
	case len(unknown) > 0:
		r.Verdict = checkers.Unknown
		r.Reason = strings.Join(unknown, "; ")
	case len(r.Checks) == 0:
		r.Verdict = checkers.Unknown
		r.Reason = "no checker result"
	default:
		r.Verdict = checkers.Valid
	}
}

// kindSummary names the kinds a proving check found, without counts: the
// one count is AnomalyCount (the checks' own counts differ, and count one
// violation under two kinds).
func kindSummary(res *checkers.Result) string {
	kinds := map[string]bool{}
	for k := range res.KindCounts {
		kinds[k] = true
	}
	for _, a := range res.Anomalies {
		kinds[a.Kind] = true
	}
	delete(kinds, checkers.KindTokensNotAuthenticated)
	return "the direct checks found " + strings.Join(sortedKeys(kinds), ", ")
}

// gate applies what a release gate needs beyond the checkers' verdict: a
// valid history from a run that did too little, or did not finish, is
// unknown; a violation is a violation however the run went. It reads the
// run from the history itself (run and nemesis events), so a re-check of a
// stored run reaches the same verdict as the run did. damage is how many
// lines or events a lenient read skipped: a damaged history is unknown
// whatever the checkers say, as a skipped line can hide or fake a violation.
// silent are the nodes that served nothing for most of the main phase
// (service.go), in words.
func (r *Result) gate(damage int, silent []string) {
	var why []string
	switch min := r.Settings.MinOps; {
	case min > 0 && r.Counts.Definite < min:
		why = append(why, fmt.Sprintf("too few operations to judge: only %d ended ok or fail; the gate needs at least %d (--min-ops)", r.Counts.Definite, min))
	case min == 0 && r.Counts.Definite == 0:
		r.Notes = append(r.Notes, "nothing to judge: no client operation ended ok or fail, and --min-ops 0 asked for no minimum (the default asks for at least "+fmt.Sprint(DefaultMinOps)+")")
	case min == 0 && r.Counts.Definite < DefaultMinOps:
		r.Notes = append(r.Notes, fmt.Sprintf("a small history: only %d operations ended ok or fail, judged with no minimum (--min-ops 0; the default asks for at least %d)", r.Counts.Definite, DefaultMinOps))
	}
	var named []string
	if r.Run != nil {
		named = namedNemeses(r.Run.Requested)
	}
	if run := r.Run; run != nil {
		if slices.Contains(named, nemesis.Pause) && r.pausedHolders() && r.LateWrites.Total == 0 {
			// Like a fault that never took effect, measured from the other
			// side: holders were paused, but none woke with an expired
			// lease and wrote.
			why = append(why, "nemesis pause was requested but never produced the scenario it is for: no holder wrote after another client had been granted a newer token for its lock (no late write by an expired holder)")
		}
		for _, n := range named {
			if reason, ok := run.NotApplicable[n]; ok {
				why = append(why, fmt.Sprintf("nemesis %s was requested but cannot act on this target: %s", n, reason))
				continue
			}
			c := r.Nemeses[n]
			if c.Started > 0 {
				continue
			}
			msg := fmt.Sprintf("nemesis %s was requested but never took effect", n)
			switch {
			case c.LastError != "":
				msg += ": " + c.LastError
			case run.Waited[n] > 0:
				msg += ": every node it could act on was held by another fault until the run ended (a longer --time gives it a turn)"
			}
			why = append(why, msg)
		}
		r.Notes = append(r.Notes, untried(run, r.Nemeses, named)...)
		switch {
		case run.CutShort && run.Complete:
			why = append(why, "the run was cut short (interrupted: its main phase ended early)")
		case run.CutShort:
			w := "the run was cut short (interrupted: its main phase ended early), and its final phase did not complete"
			if len(run.Problems) > 0 {
				w += ": " + strings.Join(run.Problems, "; ")
			}
			why = append(why, w)
		case !run.Ended:
			why = append(why, "the run did not finish: the history has no end event (the harness was killed, or the run is still going)")
		case !run.Complete:
			w := "the run's final phase did not complete (heal, recovery or final reads failed)"
			if len(run.Problems) > 0 {
				w += ": " + strings.Join(run.Problems, "; ")
			}
			why = append(why, w)
		}
	}
	why = append(why, silent...)
	if r.Settings.RequireCoverage {
		why = append(why, r.Coverage.gateReasons()...)
	}
	why = append(why, failedModes(r.Nemeses, named)...)
	why = append(why, unendedFaults(r.Nemeses)...)
	if damage > 0 {
		why = append(why, fmt.Sprintf("the history is damaged: %d lines or events were skipped, so no verdict can be trusted", damage))
	}
	r.GateReasons = why
	if len(why) == 0 {
		return
	}
	switch {
	case damage > 0:
		if r.Verdict != checkers.Unknown {
			why = append(why, fmt.Sprintf("the checkers said %s (%s)", r.Verdict, r.Reason))
		} else if r.Reason != "" {
			why = append(why, r.Reason)
		}
		r.Verdict, r.Reason = checkers.Unknown, strings.Join(why, "; ")
	case r.Verdict == checkers.Valid:
		r.Verdict, r.Reason = checkers.Unknown, "the history is valid, but "+strings.Join(why, "; ")
	case r.Verdict == checkers.Invalid:
		r.Reason += " (a violation is a violation, although " + strings.Join(why, "; ") + ")"
	}
}

// untried notes the nemeses of the run that neither took effect nor failed,
// where the request did not name them (named) ("all": it need not take effect, and
// the verdict stands, but the reader is told): a member replacement that
// the cluster declined each time while other faults kept its quorum away
// was otherwise missing from every report.
func untried(run *RunRecord, nemeses map[string]NemesisCount, named []string) []string {
	var out []string
	for _, n := range run.Nemeses {
		if c := nemeses[n]; slices.Contains(named, n) || c.Started > 0 || c.Failed > 0 {
			continue
		}
		msg := fmt.Sprintf("nemesis %s never took effect in this run: ", n)
		if w := run.Waited[n]; w > 0 {
			msg += fmt.Sprintf("it found every node it could act on held by another fault (%s), and the target declined any other try (a change it could not make safely then)", times(w))
		} else {
			msg += "the target declined every try (a change it could not make safely then), or none came in the run's time"
		}
		out = append(out, msg)
	}
	return out
}

// pausedHolders says whether the pause nemesis paused lock holders (a node
// pause only freezes a server: it need not make a late write).
func (r *Result) pausedHolders() bool {
	for _, f := range r.Faults {
		if f.Nemesis == nemesis.Pause && f.Mode() == nemesis.PauseHolders {
			return true
		}
	}
	return false
}

// namedNemeses lists explicitly named nemeses ("all" names none: it means
// whatever applies).
func namedNemeses(spec string) []string {
	var out []string
	for _, n := range strings.Split(spec, ",") {
		n = strings.TrimSpace(n)
		if n != "" && n != "all" && n != "none" {
			out = append(out, n)
		}
	}
	return out
}
