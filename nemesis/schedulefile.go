package nemesis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// ScheduleVersion is the version of the schedule file format (schedule.json,
// documented in docs/reports.md).
const ScheduleVersion = 1

// ScheduleFile is a run folder's schedule, schedule.json.
const ScheduleFile = "schedule.json"

// Schedule is a run's faults as data: every fault the scheduler planned, with
// its nemesis, nodes, parameters, start and length. A run records the one it
// carried out (drawn from the seed, or replayed), and `fencecheck test
// --schedule FILE` carries one out instead of drawing.
type Schedule struct {
	Version int `json:"schedule_version"`
	// Seed is the seed of the run that recorded the schedule; Nemesis the
	// nemeses it asked for ("all", "pause,restart") and ReplayOf the
	// schedule file it replayed, if any. None of them changes a replay.
	Seed     uint64 `json:"seed,omitempty"`
	Nemesis  string `json:"nemesis,omitempty"`
	ReplayOf string `json:"replay_of,omitempty"`
	// MainPhase is the length of the main phase the faults were planned
	// in; a replay without --time runs that long.
	MainPhase time.Duration `json:"main_phase_ns"`
	// Mode is "guided" for a schedule the guided scheduler drew, and Calm
	// its calm phases, when no fault touched a node. A replay carries out
	// the faults and tells the workload of the calm phases at their times
	// (CalmFollower), as the guided run did.
	Mode   string      `json:"mode,omitempty"`
	Calm   []Phase     `json:"calm,omitempty"`
	Faults []Scheduled `json:"faults"`
}

// Scheduled is one planned fault.
type Scheduled struct {
	Nemesis string `json:"nemesis"`
	// Nodes, TakesOver and Params are the fault's Plan.
	Nodes     []string `json:"nodes"`
	TakesOver bool     `json:"takes_over,omitempty"`
	Outage    bool     `json:"outage,omitempty"`
	Params    any      `json:"params,omitempty"`
	// Start is when the fault started, in history time (ns since the run's
	// start, as in history.jsonl); Duration how long it stays before it is
	// stopped (0 for a fault that failed to start).
	Start    time.Duration `json:"start_ns"`
	Duration time.Duration `json:"duration_ns"`
	// What happened in the run that recorded the schedule: the fault's
	// extra.id in the history, why it failed to start, how long it waited
	// for a node held by another fault. A replay ignores them.
	ID     int64         `json:"id,omitempty"`
	Error  string        `json:"error,omitempty"`
	Waited time.Duration `json:"waited_ns,omitempty"`
	// Why the guided scheduler chose it: the situation it aimed at and its
	// count then ("resource-restart-stale 1 of 3"), "first turn", "explore"
	// (guide.go's nextFault); none for a fault it did not choose.
	Why string `json:"why,omitempty"`

	// line is where the fault begins in the file it was read from.
	line int
}

// Plan is the fault's plan, as its nemesis's Start takes it.
func (f Scheduled) Plan() Plan {
	return Plan{Nodes: f.Nodes, TakesOver: f.TakesOver, Outage: f.Outage, Params: f.Params}
}

// End is when the fault is stopped.
func (f Scheduled) End() time.Duration { return f.Start + f.Duration }

// Describe is the fault in words: "restart of reference at 2.10 s for
// 0.80 s", with the mode when its parameters have one ("partition
// (issuers) of issuer-1, issuer-2 at ...").
func (f Scheduled) Describe() string {
	what := f.Nemesis
	if m := paramMode(f.Params); m != "" {
		what += " (" + m + ")"
	}
	if len(f.Nodes) > 0 {
		what += " of " + strings.Join(f.Nodes, ", ")
	}
	return fmt.Sprintf("%s at %.2f s for %.2f s", what, f.Start.Seconds(), f.Duration.Seconds())
}

// paramMode is the "mode" of a fault's parameters, if they have one.
func paramMode(params any) string {
	b, err := json.Marshal(params)
	if err != nil {
		return ""
	}
	var m struct {
		Mode string `json:"mode"`
	}
	_ = json.Unmarshal(b, &m)
	return m.Mode
}

// where names a fault in an error: its number and, when read from a file,
// its line.
func (f Scheduled) where(i int) string {
	if f.line > 0 {
		return fmt.Sprintf("line %d: fault %d (%s)", f.line, i+1, f.Nemesis)
	}
	return fmt.Sprintf("fault %d (%s)", i+1, f.Nemesis)
}

// Nemeses lists the nemeses the schedule's faults use, sorted.
func (s *Schedule) Nemeses() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range s.Faults {
		if !seen[f.Nemesis] {
			seen[f.Nemesis] = true
			out = append(out, f.Nemesis)
		}
	}
	sort.Strings(out)
	return out
}

// Kinds counts the faults by nemesis: "restart ×2, partition" (most first).
func (s *Schedule) Kinds() string {
	n := map[string]int{}
	for _, f := range s.Faults {
		n[f.Nemesis]++
	}
	names := s.Nemeses()
	sort.SliceStable(names, func(i, j int) bool { return n[names[i]] > n[names[j]] })
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name
		if n[name] > 1 {
			parts[i] += fmt.Sprintf(" ×%d", n[name])
		}
	}
	return strings.Join(parts, ", ")
}

// Marshal is the schedule as schedule.json: indented, faults in start order.
func (s *Schedule) Marshal() ([]byte, error) {
	c := *s
	c.Version = ScheduleVersion
	c.Faults = append([]Scheduled(nil), s.Faults...)
	sort.SliceStable(c.Faults, func(i, j int) bool { return c.Faults[i].Start < c.Faults[j].Start })
	if c.Faults == nil {
		c.Faults = []Scheduled{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "clients->reference", as people write it
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadSchedule reads and checks a schedule file (ParseSchedule).
func ReadSchedule(path string) (*Schedule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseSchedule(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseSchedule decodes a schedule strictly (an unknown field is an error:
// it is likely a typo) and checks what can be checked without a target:
// known nemeses, parameters of the nemesis's own type, times, and that no
// two faults clash (Check). Errors name the line.
func ParseSchedule(data []byte) (*Schedule, error) {
	var raw struct {
		Version   int               `json:"schedule_version"`
		Seed      uint64            `json:"seed"`
		Nemesis   string            `json:"nemesis"`
		ReplayOf  string            `json:"replay_of"`
		MainPhase time.Duration     `json:"main_phase_ns"`
		Mode      string            `json:"mode"`
		Calm      []Phase           `json:"calm"`
		Faults    []json.RawMessage `json:"faults"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, jsonError(data, 0, err)
	}
	if raw.Version != ScheduleVersion {
		return nil, fmt.Errorf("schedule_version %d: this fencecheck reads version %d", raw.Version, ScheduleVersion)
	}
	s := &Schedule{Version: raw.Version, Seed: raw.Seed, Nemesis: raw.Nemesis, ReplayOf: raw.ReplayOf, MainPhase: raw.MainPhase,
		Mode: raw.Mode, Calm: raw.Calm}
	from := 0
	for i, r := range raw.Faults {
		// A fault's text is verbatim in the file, after the one before it.
		at := from
		if k := bytes.Index(data[from:], r); k >= 0 {
			at = from + k
			from = at + len(r)
		}
		f, err := parseFault(r)
		if err != nil {
			return nil, fmt.Errorf("fault %d: %w", i+1, jsonError(data, at, err))
		}
		f.line = lineOf(data, at)
		s.Faults = append(s.Faults, f)
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	return s, nil
}

func parseFault(r json.RawMessage) (Scheduled, error) {
	var f struct {
		Scheduled
		Params json.RawMessage `json:"params"`
	}
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Scheduled{}, err
	}
	out := f.Scheduled
	nem, ok := lookup(out.Nemesis)
	if !ok {
		return out, fmt.Errorf("unknown nemesis %q (known: %s)", out.Nemesis, strings.Join(Names(), ", "))
	}
	params := nem.Params()
	empty := len(f.Params) == 0 || string(f.Params) == "null"
	switch {
	case params == nil && !empty && string(bytes.TrimSpace(f.Params)) != "{}":
		return out, fmt.Errorf("%s takes no params, got %s", out.Nemesis, f.Params)
	case params != nil && empty && paramsOptional(nem):
		// A schedule written before the nemesis took params: their zero
		// value is what it did then.
	case params != nil && empty:
		return out, fmt.Errorf("%s needs params", out.Nemesis)
	case params != nil:
		pd := json.NewDecoder(bytes.NewReader(f.Params))
		pd.DisallowUnknownFields()
		if err := pd.Decode(params); err != nil {
			return out, fmt.Errorf("params of %s: %w", out.Nemesis, err)
		}
	}
	out.Params = params
	return out, nil
}

// jsonError adds the line of a decoding error (at offset base + the
// error's own offset) to err.
func jsonError(data []byte, base int, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("line %d: %w", lineOf(data, base+int(syn.Offset)), err)
	case errors.As(err, &typ):
		return fmt.Errorf("line %d: %w", lineOf(data, base+int(typ.Offset)), err)
	case base > 0:
		return fmt.Errorf("line %d: %w", lineOf(data, base), err)
	}
	return err
}

func lineOf(data []byte, offset int) int {
	offset = min(max(offset, 0), len(data))
	return bytes.Count(data[:offset], []byte("\n")) + 1
}

// Check says whether the schedule can be carried out on any target: every
// nemesis is known, times are sane, a nemesis has one fault live at a time
// (as when drawn), and no two faults take one node over at once.
func (s *Schedule) Check() error {
	var errs []error
	bad := func(i int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", s.Faults[i].where(i), fmt.Sprintf(format, args...)))
	}
	for i, f := range s.Faults {
		if _, ok := lookup(f.Nemesis); !ok {
			bad(i, "unknown nemesis (known: %s)", strings.Join(Names(), ", "))
		}
		if f.Start < 0 || f.Duration < 0 {
			bad(i, "start_ns and duration_ns must not be negative")
		}
	}
	order := make([]int, len(s.Faults))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return s.Faults[order[a]].Start < s.Faults[order[b]].Start })
	for a, i := range order {
		fi := s.Faults[i]
		for _, j := range order[a+1:] {
			fj := s.Faults[j]
			if fj.Start >= fi.End() {
				break
			}
			if fi.Nemesis == fj.Nemesis {
				bad(j, "starts while %s is still live: a nemesis has one fault live at a time", fi.where(i))
				continue
			}
			if fi.TakesOver && fj.TakesOver {
				if n := shared(fi.Nodes, fj.Nodes); n != "" {
					bad(j, "takes over %s while %s holds it", n, fi.where(i))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func shared(a, b []string) string {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return x
			}
		}
	}
	return ""
}

// CheckTarget says whether the schedule can be carried out on env's target:
// each fault's nemesis applies, its nodes exist, and its parameters name
// only what env has (PlanChecker). nemeses are the nemeses the run
// instantiated for the schedule (by name).
func (s *Schedule) CheckTarget(env *Env, nemeses []Nemesis, notApplicable map[string]string) error {
	byName := map[string]Nemesis{}
	for _, n := range nemeses {
		byName[n.Name()] = n
	}
	known := knownNodes(env)
	var errs []error
	for i, f := range s.Faults {
		if why, ok := notApplicable[f.Nemesis]; ok {
			errs = append(errs, fmt.Errorf("%s: the nemesis cannot act on this target: %s", f.where(i), why))
			continue
		}
		n, ok := byName[f.Nemesis]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: the nemesis is not part of this run", f.where(i)))
			continue
		}
		var missing []string
		for _, node := range f.Nodes {
			if !known[node] {
				missing = append(missing, node)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("%s: the target has no node %s (it has: %s)", f.where(i),
				strings.Join(missing, ", "), strings.Join(sortedKeys(known), ", ")))
			continue
		}
		if pc, ok := n.(PlanChecker); ok {
			if err := pc.CheckPlan(env, f.Plan()); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.where(i), err))
			}
		}
	}
	return errors.Join(errs...)
}

// ParamsOptional is a nemesis whose params a schedule may leave out (it took
// none before, and their zero value does what it did then).
type ParamsOptional interface{ ParamsOptional() bool }

func paramsOptional(n Nemesis) bool {
	po, ok := n.(ParamsOptional)
	return ok && po.ParamsOptional()
}
