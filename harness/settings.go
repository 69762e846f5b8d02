package harness

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/workloads"
)

// Setting is one setting of a Config as a command-line flag of `fencecheck
// test`: cmd/fencecheck binds a flag to each (its name, its help, the field
// it sets), and Command writes each back, so a setting that has a flag
// cannot be left out of the line that repeats a run. The flag library is
// the command's own: this package only says what the settings are.
type Setting struct {
	Name, Usage string
	// Value points at the field: a *string, *[]string (comma-separated),
	// *time.Duration, *int, *uint64 or *bool, or a FlagValue for a field
	// whose text is its own.
	Value any
}

// FlagValue is a setting that reads and writes its own text: the shape of
// flag.Value and pflag.Value.
type FlagValue interface {
	String() string
	Set(string) error
	Type() string
}

// Settings lists c's settings bound to c's fields, in the order the help
// shows them (target first). Their defaults are what c holds when the flags
// are bound: Default's, for `fencecheck test`.
func (c *Config) Settings() []Setting {
	return []Setting{
		{"target", "target to test, or spec:FILE", &c.Target},
		{"bug", "memory reference bug switch(es) to turn on (see 'fencecheck targets')", &c.Bugs},
		{"seal-key", "memory reference: authenticate tokens with this HMAC key", &c.SealKey},
		{"version", "release of a system built from source (etcd: 3.5, 3.6, 3.7 or any v3.x.y the Go module proxy serves; default: the one images/etcd pins); a Debian package's target says which it ran", &c.Version},
		{"members", "cluster size, where it means something (etcd, zookeeper): 1, 3 or 5 (default 3)", optionalInt{&c.Members}},
		{"time", "length of the main phase", &c.Time},
		{"concurrency", "writer clients", &c.Concurrency},
		{"keys", "keys each profile scales its own from, not the total: steady, long-holders and crashing-holders use N, skewed 8N (16 or more), many-locks 20N (64 or more), storm 1; the main-phase log line says how many the run uses", &c.Keys},
		{"namespace", "prefix of every lock, key and value name the run sends (default: a new one derived from the run id; two runs with one namespace against one long-lived server read each other's values)", &c.Namespace},
		{"readers", "extra clients that only read (0: none)", zeroIsNone{&c.Readers}},
		{"ttl", "lease the clients ask for", &c.TTL},
		{"op-timeout", "per-request timeout; a request past it is recorded as info", &c.OpTimeout},
		{"forge", "add the forge workload: writes with tokens no issuer signed (always on for a target that declares authenticated tokens)", &c.Forge},
		{"strict-contract", "stop at any deviation from Fencing API v1 the preflight finds (as fencecheck conform judges); without it, deviations that cannot let a stale, equal, missing or forged token through are reported and the run goes on", &c.StrictContract},
		{"profile", "workload traffic profile(s): " + strings.Join(workloads.ProfileNames(), ", ") + " (all: each writer one profile, the mix drawn from --seed; a list: the writers take them in turn)", &c.Profile},
		{"nemesis", "comma-separated nemeses (" + strings.Join(nemesis.Names(), ", ") + "), 'all' (every one that applies, except " + strings.Join(nemesis.OptInNames(), " and ") + ") or 'none'", &c.Nemesis},
		{"nemesis-mode", "how faults are drawn: guided (fault phases between calm phases with no fault on a node, each fault aimed at the failure situation furthest below 3 in the live coverage) or random (each nemesis on its own seeded schedule); default: guided for 'all', random for a list", &c.NemesisMode},
		{"seed", "seed for the workload and the fault schedule (0: from the clock; printed so the run can be reproduced)", &c.Seed},
		{"schedule", "replay this fault schedule (a run's schedule.json) instead of drawing faults from --seed; its nemeses replace --nemesis, and without --time its main phase is the schedule's", &c.Schedule},
		{"recovery", "how long the final phase waits for every node to answer after the heal", &c.Recovery},
		{"checker", "checkers beside the direct checks: " + analysis.CheckerChoices() + ", or a comma-separated list of them", &c.Checker},
		{"check-timeout", "time Porcupine may search", &c.CheckTimeout},
		{"min-ops", "fewest operations ending ok or fail for a verdict other than unknown (0: no minimum)", zeroIsNone{&c.MinOps}},
		{"require-coverage", "a valid run that never provoked a failure class that applies to the target (docs/coverage.md: no situation of it created) is unknown (exit 2), the class named", &c.RequireCoverage},
		{"store", "run store folder", &c.Store},
		{"junit", "also write the JUnit XML file here", &c.JUnit},
	}
}

// text is the setting's value as its flag reads it.
func (s Setting) text() string {
	switch v := s.Value.(type) {
	case *string:
		return *v
	case *[]string:
		return strings.Join(*v, ",")
	case *time.Duration:
		return v.String()
	case *int:
		return strconv.Itoa(*v)
	case *uint64:
		return strconv.FormatUint(*v, 10)
	case *bool:
		return strconv.FormatBool(*v)
	case FlagValue:
		return v.String()
	}
	panic(fmt.Sprintf("setting %s: a value of type %T", s.Name, s.Value))
}

// notReproduced are the settings Command leaves out: where else the results
// go is not a setting of the run (a repeat must not overwrite CI's file).
var notReproduced = map[string]bool{"junit": true}

// Command is the fencecheck command line that repeats a run of c: every
// setting, defaults included (they may change between versions), the seed
// too. It is made from Settings, as the flags are.
func (c Config) Command() []string {
	out := []string{"fencecheck", "test"}
	for _, s := range c.Settings() {
		if notReproduced[s.Name] || s.Name == "nemesis" && c.Schedule != "" {
			continue // a replay's nemeses are its schedule's
		}
		if v := s.text(); v != "" {
			out = append(out, "--"+s.Name+"="+v)
		}
	}
	return out
}

// zeroIsNone is an int setting whose 0 means none. A Config stores none as
// a negative number, since a zero field takes the default.
type zeroIsNone struct{ p *int }

func (v zeroIsNone) String() string {
	if v.p == nil || *v.p < 0 {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v zeroIsNone) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	if n < 0 {
		return fmt.Errorf("must be >= 0, got %d", n)
	}
	if n == 0 {
		n = -1
	}
	*v.p = n
	return nil
}

func (zeroIsNone) Type() string { return "int" }

// optionalInt is an int setting whose 0 is the target's default: left out
// of the reproduce line, as a setting a target does not take must be.
type optionalInt struct{ p *int }

func (v optionalInt) String() string {
	if v.p == nil || *v.p == 0 {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v optionalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	*v.p = n
	return nil
}

func (optionalInt) Type() string { return "int" }
