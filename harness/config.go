package harness

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/workloads"
)

// Config is every setting of one run, from the target to the checkers: what
// `fencecheck test`'s flags set, what the Go gate API takes, what config.json
// records and what Command turns back into a command line. A zero field
// takes its value from Default.
type Config struct {
	// Target is the name the target is chosen by: memory, etcd, redis,
	// redis-volatile or spec:PATH.
	Target string `json:"target"`
	// Bugs are the reference's bug switches; SealKey makes it seal tokens
	// and verify seals (memory target only).
	Bugs    []string `json:"bugs,omitempty"`
	SealKey string   `json:"seal_key,omitempty"`
	// Version is the release of the system a target builds from source
	// (etcd: any release the Go module proxy serves, "3.5" and the like
	// naming a pinned one); "" is the target's default. A target whose
	// server comes from a Debian package takes none and says which it ran
	// (Run.System).
	Version string `json:"version,omitempty"`
	// Members is the cluster's size for a target where it means something
	// (etcd, zookeeper: 1, 3 or 5); zero is the target's default.
	Members int `json:"members,omitempty"`

	// Time is the length of the main phase.
	Time time.Duration `json:"time_ns"`
	// Concurrency is the number of writer clients; Keys the number each
	// traffic profile scales its keys from (workloads/profiles.go), not the
	// run's total.
	Concurrency int `json:"concurrency"`
	Keys        int `json:"keys"`
	// Namespace scopes every lock, key and value name the run sends
	// (workloads/namespace.go); "" derives a new one from the run id, so
	// runs against one long-lived system never share a name.
	Namespace string `json:"namespace,omitempty"`
	// Readers is the number of extra clients that only read; a negative
	// number means none (zero takes the default).
	Readers int `json:"readers"`
	// TTL is the lease clients ask for.
	TTL time.Duration `json:"ttl_ns"`
	// OpTimeout bounds each client request; past it the op is info.
	OpTimeout time.Duration `json:"op_timeout_ns"`
	// Forge adds the forge workload (writes with tokens no issuer signed);
	// a target that declares authenticated tokens always gets it.
	Forge bool `json:"forge"`
	// StrictContract stops a spec target's start at any deviation from the
	// contract the preflight finds; otherwise deviations that cannot let a
	// bad token through are reported and the run goes on.
	StrictContract bool `json:"strict_contract,omitempty"`
	// Profile is the workload's traffic (workloads/profiles.go): a
	// profile, a comma-separated list the writers take in turn, or "all":
	// each writer one profile, the mix drawn from Seed.
	Profile string `json:"profile"`

	// Nemesis is the comma-separated nemesis list: names, "all" (every one
	// that applies, except opt-in ones) or "none".
	Nemesis string `json:"nemesis"`
	// NemesisMode is how faults are drawn: "guided" (fault phases between
	// calm phases, each fault aimed at the failure situation furthest below
	// target in the live coverage; nemesis/guide.go) or "random" (each
	// nemesis on its own seeded schedule, as before guided schedules); ""
	// is guided for "all" and random for a list.
	NemesisMode string `json:"nemesis_mode,omitempty"`
	// Seed drives every random choice of the workload and the nemeses; zero
	// draws one from the clock (WithDefaults), recorded so the run can be
	// repeated.
	Seed uint64 `json:"seed"`
	// Schedule, when set, is a schedule file (a run's schedule.json) whose
	// faults the run carries out instead of drawing them from Seed (which
	// still drives the workload). Nemesis is then the schedule's nemeses,
	// and a zero Time the schedule's main phase (WithSchedule).
	Schedule string `json:"schedule,omitempty"`
	// Recovery bounds the wait for every node to answer after the heal, and
	// the final reads.
	Recovery time.Duration `json:"recovery_ns"`

	// Checker names the checkers beside the direct checks: a
	// comma-separated list of the checker table's names, or "both"
	// (analysis.NormalizeChecker).
	Checker string `json:"checker"`
	// CheckTimeout bounds Porcupine's search.
	CheckTimeout time.Duration `json:"check_timeout_ns"`
	// MinOps is the fewest client operations that must end ok or fail for a
	// verdict other than unknown; a negative number means no minimum (zero
	// takes the default).
	MinOps int `json:"min_ops"`
	// RequireCoverage: a valid run that left a failure class that applies
	// uncovered (docs/coverage.md) is unknown. Off by default, in the CLI
	// and the Go gate alike (docs/gating.md says why).
	RequireCoverage bool `json:"require_coverage,omitempty"`

	// Store is the root of the run store.
	Store string `json:"store"`
	// JUnit, when set, is where the run's junit.xml is also copied.
	JUnit string `json:"junit,omitempty"`
	// Progress receives live progress lines; nil for none.
	Progress io.Writer `json:"-"`
	// Log receives phase messages; nil for none.
	Log io.Writer `json:"-"`
	// Abort, when closed, ends the run at once (the CLI's second Ctrl-C):
	// whatever of the final phase and the check is left is skipped, the
	// target is torn down and no report is written (ErrAborted). The
	// caller's context ending only cuts the main phase short.
	Abort <-chan struct{} `json:"-"`
	_     struct{}
}

// Default is the configuration of `fencecheck test` with no flags: the one
// place defaults are defined. The CLI's flags, the Go gate API and
// WithDefaults take them from here; the checker's come from the checkers.
func Default() Config {
	return Config{
		Target: "memory",
		Time:   30 * time.Second, Concurrency: 5, Keys: 3, Readers: 2,
		TTL: history.DefaultTTL, OpTimeout: time.Second, Profile: workloads.ProfileAll,
		Nemesis: "all", Recovery: 30 * time.Second,
		Checker: analysis.DefaultChecker, CheckTimeout: analysis.DefaultTimeout, MinOps: analysis.DefaultMinOps,
		Store: "store",
	}
}

// WithDefaults returns c with every zero field set from Default, and a seed
// drawn from the clock when it has none.
func (c Config) WithDefaults() Config {
	d := Default()
	orString := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	orInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	orDuration := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	orString(&c.Target, d.Target)
	orDuration(&c.Time, d.Time)
	orInt(&c.Concurrency, d.Concurrency)
	orInt(&c.Keys, d.Keys)
	orInt(&c.Readers, d.Readers)
	orDuration(&c.TTL, d.TTL)
	orDuration(&c.OpTimeout, d.OpTimeout)
	orString(&c.Nemesis, d.Nemesis)
	orString(&c.Profile, d.Profile)
	orDuration(&c.Recovery, d.Recovery)
	orString(&c.Checker, d.Checker)
	orDuration(&c.CheckTimeout, d.CheckTimeout)
	orInt(&c.MinOps, d.MinOps)
	orString(&c.Store, d.Store)
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano()&0x7fffffff) + 1
	}
	return c
}

// Validate rejects settings no run can use, all at once. Which target names
// and bug switches exist is the targets' to say (targets.New).
func (c *Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate that also returns the nemesis list parsed.
func (c *Config) validate() ([]string, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Target == "" {
		bad("--target is needed")
	}
	if c.Members != 0 && c.Members != 1 && c.Members != 3 && c.Members != 5 {
		bad("--members must be 1, 3 or 5, got %d", c.Members)
	}
	if strings.ContainsAny(c.Version, " \t\n/@") {
		bad("--version %q is not a release (e.g. 3.6 or v3.6.17)", c.Version)
	}
	if c.Time <= 0 {
		bad("--time must be positive, got %s", c.Time)
	}
	if c.Concurrency < 1 || c.Concurrency > 1000 {
		bad("--concurrency must be 1..1000, got %d", c.Concurrency)
	}
	if c.Keys < 1 || c.Keys > 10000 {
		bad("--keys must be 1..10000, got %d", c.Keys)
	}
	if err := workloads.CheckNamespace(c.Namespace); err != nil {
		bad("--namespace %v", err)
	}
	if c.Readers > 1000 {
		bad("--readers must be 0..1000, got %d", c.Readers)
	}
	if c.TTL < 10*time.Millisecond {
		bad("--ttl must be at least 10ms, got %s", c.TTL)
	}
	if c.OpTimeout <= 0 {
		bad("--op-timeout must be positive, got %s", c.OpTimeout)
	}
	nemeses, err := nemesis.Parse(c.Nemesis)
	if err != nil {
		bad("--nemesis: %v", err)
	}
	switch c.NemesisMode {
	case "", nemesis.ModeGuided, nemesis.ModeRandom:
	default:
		bad("--nemesis-mode must be %s or %s, got %q", nemesis.ModeGuided, nemesis.ModeRandom, c.NemesisMode)
	}
	if _, err := workloads.ParseProfile(c.Profile); err != nil {
		bad("--profile: %v", err)
	}
	if c.Recovery <= 0 {
		bad("--recovery must be positive, got %s", c.Recovery)
	}
	if _, err := analysis.NormalizeChecker(c.Checker); err != nil {
		bad("--checker %v", err)
	}
	if c.CheckTimeout <= 0 {
		bad("--check-timeout must be positive, got %s", c.CheckTimeout)
	}
	if c.Store == "" {
		bad("--store is needed")
	}
	return nemeses, errors.Join(errs...)
}

// Normalized is a Config made ready for one run, once: its schedule file
// read, every zero field set from Default, every setting checked, its lists
// parsed. gate.Run makes one from the flags' Config and hands it on; nothing
// after reads the schedule or parses a list again.
type Normalized struct {
	Config
	// Replay is the faults of the schedule file (Config.Schedule) the run
	// carries out; nil when it draws them.
	Replay *nemesis.Schedule
	// Nemeses is Config.Nemesis parsed (nemesis.Parse: "all" stays "all").
	Nemeses []string
}

// Normalize is the one place a run's settings become what the run uses:
// WithSchedule, WithDefaults, Validate, and the checker selection spelled
// the one way (analysis.NormalizeChecker). Its error is a usage error; the
// Config it returns with one is normalised as far as it got (its seed and
// Command are the run's).
func (c Config) Normalize() (Normalized, error) {
	c, replay, err := c.WithSchedule()
	n := Normalized{Config: c.WithDefaults(), Replay: replay}
	if err != nil {
		return n, err
	}
	if n.Nemeses, err = n.validate(); err != nil {
		return n, err
	}
	n.Checker, err = analysis.NormalizeChecker(n.Checker)
	return n, err
}

// WithSchedule reads c's schedule file, when it names one, and returns the
// config a replay of it runs with: Nemesis the schedule's nemeses ("none"
// for an empty schedule), a zero Time the schedule's main phase. The error
// says what is wrong with the file (a usage error).
func (c Config) WithSchedule() (Config, *nemesis.Schedule, error) {
	if c.Schedule == "" {
		return c, nil, nil
	}
	s, err := nemesis.ReadSchedule(c.Schedule)
	if err != nil {
		return c, nil, fmt.Errorf("--schedule: %w", err)
	}
	c.Nemesis = "none"
	if names := s.Nemeses(); len(names) > 0 {
		c.Nemesis = strings.Join(names, ",")
	}
	if c.Time == 0 {
		c.Time = s.MainPhase
	}
	return c, s, nil
}

// readers is the number of read-only clients c asks for.
func (c *Config) readers() int { return max(c.Readers, 0) }

// ShellLine joins a command line for a shell, quoting what needs it.
func ShellLine(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
