package oracle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Answer is a checker's verdict on one history.
type Answer struct {
	// Verdict: "valid", "invalid", "unknown", "input-error" (the history
	// was refused, exit 64), or "error" (the checker could not run).
	Verdict string
	// Line is the line an input error names, 0 when none.
	Line int
	// Output is what the checker printed.
	Output string
}

// Checker judges a history under the semantics.
type Checker func(history []byte, sem Semantics) Answer

// Expect is the oracle's answer in a checker's terms.
func Expect(history []byte, sem Semantics) (Answer, error) {
	res, err := Check(history, sem)
	var ie *InputError
	switch {
	case errors.As(err, &ie):
		return Answer{Verdict: "input-error", Line: ie.Line, Output: ie.Error()}, nil
	case err != nil:
		return Answer{}, err
	case res.Verdict == TooBig:
		return Answer{Verdict: string(TooBig), Output: res.String()}, nil
	}
	return Answer{Verdict: string(res.Verdict), Output: res.String()}, nil
}

// Agree reports whether a checker's answer is the oracle's: the same
// verdict, and for a refused history the same line.
func Agree(oracle, got Answer) bool {
	if oracle.Verdict != got.Verdict {
		return false
	}
	return oracle.Verdict != "input-error" || got.Line == 0 || oracle.Line == got.Line
}

// Disagreement is a history on which a checker and the oracle differ,
// shrunk while they still differ the same way.
type Disagreement struct {
	Seed    uint64
	Label   string
	Sem     Semantics
	Oracle  Answer
	Got     Answer
	History []byte // shrunk
	Ops     int    // operations before shrinking
	// Cause names the rewrites (DiffOptions.Causes) that make the checker
	// agree, "" when none does.
	Cause string
	// Class groups disagreements: the cause, or for unexplained ones the
	// two verdicts and what the checker printed per checker and model.
	Class string
	// Count is how many generated histories fell in this class.
	Count int
}

// Report is the outcome of a differential run.
type Report struct {
	Checked, TooBig int
	Valid, Invalid  int // by the oracle, among those checked
	Disagreements   []Disagreement
}

// DiffOptions bounds a differential run.
type DiffOptions struct {
	Seed    uint64 // first seed; histories use Seed, Seed+1, ...
	N       int
	Workers int
	// Causes explain disagreements (see Explain); nil means none.
	Causes []Cause
}

// Differential runs the checker and the oracle on N generated histories
// and returns every class of disagreement with its first example, shrunk.
func Differential(check Checker, opt DiffOptions) Report {
	if opt.Workers <= 0 {
		opt.Workers = 1
	}
	type result struct {
		d     Disagreement
		agree bool
	}
	results := make([]result, opt.N)
	// The causes found for each kind of disagreement (by what the checker
	// printed) are tried first on the next one that looks alike.
	var seenMu sync.Mutex
	seen := map[string][]string{}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < opt.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				seed := opt.Seed + uint64(i)
				g := Generate(seed)
				want, err := Expect(g.History, g.Sem)
				if err != nil {
					want = Answer{Verdict: "error", Output: err.Error()}
				}
				d := Disagreement{Seed: seed, Label: g.Label, Sem: g.Sem, Oracle: want, History: g.History, Ops: countOps(g.History), Count: 1}
				if want.Verdict == string(TooBig) {
					results[i] = result{d: d, agree: true}
					continue
				}
				d.Got = check(g.History, g.Sem)
				r := result{d: d, agree: Agree(want, d.Got)}
				if !r.agree {
					look := classOf(want, d.Got)
					seenMu.Lock()
					first := append([]string(nil), seen[look]...)
					seenMu.Unlock()
					cause, err := explainFirst(d, check, opt.Causes, first)
					if cause != "" && err == nil && !slices.Contains(first, cause) {
						seenMu.Lock()
						seen[look] = append(seen[look], cause)
						seenMu.Unlock()
					}
					if err != nil {
						cause = "error: " + err.Error()
					}
					r.d.Cause = cause
					r.d.Class = cause
					if cause == "" {
						r.d.Class = "unexplained: " + classOf(want, d.Got)
					}
				}
				results[i] = r
			}
		}()
	}
	for i := 0; i < opt.N; i++ {
		next <- i
	}
	close(next)
	wg.Wait()

	var rep Report
	classes := map[string]*Disagreement{}
	var order []string
	for _, r := range results {
		switch r.d.Oracle.Verdict {
		case string(TooBig):
			rep.TooBig++
			continue
		case string(Valid):
			rep.Valid++
		case string(Invalid):
			rep.Invalid++
		}
		rep.Checked++
		if r.agree {
			continue
		}
		if d, ok := classes[r.d.Class]; ok {
			d.Count++
			continue
		}
		d := r.d
		classes[d.Class] = &d
		order = append(order, d.Class)
	}
	for _, c := range order {
		d := classes[c]
		d.History = Shrink(*d, check, opt.Causes)
		d.Got = check(d.History, d.Sem)
		d.Oracle, _ = Expect(d.History, d.Sem)
		if d.Cause == "" {
			// What several features hid may show alone once shrunk.
			if cause, err := Explain(*d, check, opt.Causes); err == nil && cause != "" {
				d.Cause = cause
				d.Class = cause + " (once shrunk; " + d.Class + ")"
			}
		}
		rep.Disagreements = append(rep.Disagreements, *d)
	}
	return rep
}

var (
	checkLine   = regexp.MustCompile(`(?m)^\s+(direct|porcupine|fast)\s+(\S+)\s+(valid|invalid|unknown)`)
	anomalyKind = regexp.MustCompile(`(?m)^\s+- \[([a-z-]+)\]`)
)

// classOf names a disagreement by the verdicts, the checkers' per-model
// verdicts and the anomaly kinds in the output of fencecheck check.
func classOf(oracle, got Answer) string {
	parts := []string{"oracle " + oracle.Verdict, "got " + got.Verdict}
	for _, m := range checkLine.FindAllStringSubmatch(got.Output, -1) {
		if m[3] != "valid" {
			parts = append(parts, m[1]+"/"+m[2]+"="+m[3])
		}
	}
	kinds := map[string]bool{}
	for _, m := range anomalyKind.FindAllStringSubmatch(got.Output, -1) {
		kinds[m[1]] = true
	}
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	if len(ks) > 0 {
		parts = append(parts, "["+strings.Join(ks, ",")+"]")
	}
	return strings.Join(parts, "; ")
}

// Shrink deletes operations (an invoke, its completion and the strip
// events of a write) and other events from d's history, one at a time, as
// long as the oracle and the checker still give their verdicts and, for an
// explained disagreement, the cause's rewrite still makes them agree.
func Shrink(d Disagreement, check Checker, causes []Cause) []byte {
	var cause *Cause
	for _, set := range causeSets(causes) {
		if c := combine(set); c.Name == d.Cause {
			cause = &c
		}
	}
	lines := splitLines(d.History)
	units := unitsOf(lines)
	still := func(keep []bool) bool {
		h := joinUnits(lines, units, keep)
		want, err := Expect(h, d.Sem)
		if err != nil || want.Verdict != d.Oracle.Verdict || check(h, d.Sem).Verdict != d.Got.Verdict {
			return false
		}
		if cause == nil {
			return true
		}
		evs, err := decodeLines(h)
		if err != nil {
			return false
		}
		ok, err := explains(evs, Disagreement{Sem: d.Sem, Oracle: want}, check, *cause)
		return err == nil && ok
	}
	keep := make([]bool, len(units))
	for i := range keep {
		keep[i] = true
	}
	// Remove runs of units, halving their length, then single units until
	// none can go.
	tryDrop := func(from, to int) bool {
		var dropped []int
		for i := from; i < to && i < len(units); i++ {
			if keep[i] {
				keep[i] = false
				dropped = append(dropped, i)
			}
		}
		if len(dropped) == 0 {
			return false
		}
		if still(keep) {
			return true
		}
		for _, i := range dropped {
			keep[i] = true
		}
		return false
	}
	for size := len(units) / 2; size > 1; size /= 2 {
		for from := 0; from < len(units); from += size {
			tryDrop(from, from+size)
		}
	}
	for changed := true; changed; {
		changed = false
		for i := range units {
			if keep[i] && tryDrop(i, i+1) {
				changed = true
			}
		}
	}
	return joinUnits(lines, units, keep)
}

func splitLines(h []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.SplitAfter(h, []byte("\n")) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// unitsOf groups line numbers (0-based) into deletable units: each client
// operation with its strip events, each other event alone.
func unitsOf(lines [][]byte) [][]int {
	type lite struct {
		Process int    `json:"process"`
		Type    string `json:"type"`
		F       string `json:"f"`
		Key     string `json:"key"`
		Value   string `json:"value"`
	}
	var units [][]int
	open := map[int]int{}      // process -> unit
	writes := map[string]int{} // key + value -> unit of the latest write
	for i, l := range lines {
		var e lite
		if json.Unmarshal(l, &e) != nil {
			units = append(units, []int{i})
			continue
		}
		if e.Process < 0 {
			if u, ok := writes[e.Key+"\x00"+e.Value]; ok && e.F == "strip" {
				units[u] = append(units[u], i)
				continue
			}
			units = append(units, []int{i})
			continue
		}
		if e.Type == "invoke" {
			open[e.Process] = len(units)
			units = append(units, []int{i})
			if e.F == "write" {
				writes[e.Key+"\x00"+e.Value] = len(units) - 1
			}
			continue
		}
		if u, ok := open[e.Process]; ok {
			units[u] = append(units[u], i)
			delete(open, e.Process)
			if e.F == "write" {
				writes[e.Key+"\x00"+e.Value] = u
			}
			continue
		}
		units = append(units, []int{i})
	}
	return units
}

func joinUnits(lines [][]byte, units [][]int, keep []bool) []byte {
	drop := map[int]bool{}
	for u, ls := range units {
		if !keep[u] {
			for _, l := range ls {
				drop[l] = true
			}
		}
	}
	var b bytes.Buffer
	for i, l := range lines {
		if !drop[i] {
			b.Write(l)
		}
	}
	return b.Bytes()
}

func countOps(h []byte) int {
	return bytes.Count(h, []byte(`"type":"invoke"`))
}

// CLI returns a Checker that runs `BIN check ARGS... SEMANTICS-FLAGS FILE`,
// the command a user runs, and reads its exit code: 0 valid, 1 invalid, 2
// unknown, 64 input error (with the line the message names).
func CLI(bin string, args ...string) Checker {
	return func(history []byte, sem Semantics) Answer {
		dir, err := os.MkdirTemp("", "fencecheck-oracle-")
		if err != nil {
			return Answer{Verdict: "error", Output: err.Error()}
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "history.jsonl")
		if err := os.WriteFile(path, history, 0o644); err != nil {
			return Answer{Verdict: "error", Output: err.Error()}
		}
		argv := append(append(append([]string{"check"}, args...), sem.Flags()...), path)
		cmd := exec.Command(bin, argv...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			return Answer{Verdict: "error", Output: err.Error()}
		}
		a := Answer{Output: out.String()}
		switch code {
		case 0:
			a.Verdict = "valid"
		case 1:
			a.Verdict = "invalid"
		case 2:
			a.Verdict = "unknown"
		case 64:
			a.Verdict = "input-error"
			if m := lineRef.FindStringSubmatch(a.Output); m != nil {
				a.Line, _ = strconv.Atoi(m[1])
			}
		default:
			a.Verdict = "error"
			a.Output = fmt.Sprintf("exit %d: %s", code, a.Output)
		}
		return a
	}
}

var lineRef = regexp.MustCompile(`line (\d+)`)

// Format is a disagreement for a report: the verdicts, the semantics and
// the shrunk history.
func (d Disagreement) Format() string {
	return fmt.Sprintf("%s (%d histories; first seed %d, %s, %d ops shrunk to %d)\nsemantics: %v\noracle: %s\nchecker: %s\n%s",
		d.Class, d.Count, d.Seed, d.Label, d.Ops, countOps(d.History), d.Sem.Flags(),
		d.Oracle.Output, strings.TrimSpace(d.Got.Output), d.History)
}
