package nemesis

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Env is what a nemesis may act on. Target and Workload are asserted against
// the capability interfaces (Pauser, Restarter, ClockSkewer, HolderPauser...).
type Env struct {
	Target   any
	Workload any
	// Links are the harness's proxies between clients and nodes (and between
	// nodes, where a target routes through them); nil when none.
	Links any
	// TTL is the lease time clients ask for; pauses are sized from it.
	TTL time.Duration
	Log io.Writer
	// claims keeps two nemeses off one node (set by NewScheduler; nil lets
	// a nemesis used on its own take any node).
	claims *claims
}

// Fault is one injected fault, live until Stop.
type Fault struct {
	// Nodes the fault acts on (for the history and the report).
	Nodes []string
	// Details are recorded with the start event (offsets, modes, groups...).
	Details map[string]any
	// Stop undoes the fault. It must be safe to call after Heal.
	Stop func(ctx context.Context) error
}

// Nemesis is one kind of fault.
type Nemesis interface {
	Name() string
	// Applicable says whether the nemesis can act on env, and why not.
	Applicable(env *Env) (ok bool, why string)
	// Start injects one fault chosen with rng.
	Start(ctx context.Context, env *Env, rng *rand.Rand) (*Fault, error)
}

// Healer is a nemesis that can undo every fault of its kind at once (the
// final heal), beyond stopping its current fault.
type Healer interface {
	Heal(ctx context.Context, env *Env) error
}

// OptIn marks a nemesis that "all" leaves out because it breaks even a
// correct system (restart-wipe destroys the data a durable system relies on).
type OptIn interface{ OptInOnly() bool }

// Timing shapes a nemesis's schedule: quiet periods and fault periods, each
// drawn uniformly from [min, max].
type Timing struct {
	QuietMin, QuietMax time.Duration
	FaultMin, FaultMax time.Duration
}

// Timed is a nemesis that wants its own timing (e.g. pause must outlast the
// lease).
type Timed interface {
	Timing(env *Env) Timing
}

// DefaultTiming suits runs of tens of seconds.
var DefaultTiming = Timing{QuietMin: 1 * time.Second, QuietMax: 3 * time.Second, FaultMin: 1 * time.Second, FaultMax: 3 * time.Second}

// registry is the table of nemeses by name: adding one is adding a line.
var registry = map[string]func() Nemesis{}

// Register adds a nemesis constructor to the table.
func Register(name string, mk func() Nemesis) { registry[name] = mk }

// Names lists the registered nemeses, sorted.
func Names() []string {
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Parse turns "pause,restart" (or "all", or "none"/"") into nemeses. "all"
// means every registered nemesis that is applicable to env, chosen later by
// Select.
func Parse(spec string) ([]string, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "none" {
		return nil, nil
	}
	if spec == "all" {
		return []string{"all"}, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range strings.Split(spec, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if _, ok := registry[n]; !ok {
			return nil, fmt.Errorf("unknown nemesis %q (known: %s, all, none)", n, strings.Join(Names(), ", "))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// Selection is the outcome of matching requested nemeses to a target.
type Selection struct {
	Active []Nemesis
	// NotApplicable maps a requested nemesis to why it cannot act here.
	NotApplicable map[string]string
}

// Select instantiates the named nemeses (expanding "all") and sorts out those
// that do not apply to env. An explicitly named nemesis that does not apply
// is listed in NotApplicable; under "all" it is silently left out but still
// listed, so reports say what was not exercised.
func Select(names []string, env *Env) Selection {
	sel := Selection{NotApplicable: map[string]string{}}
	if len(names) == 1 && names[0] == "all" {
		names = nil
		for _, n := range Names() {
			if o, ok := registry[n]().(OptIn); !ok || !o.OptInOnly() {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		nem := registry[n]()
		if ok, why := nem.Applicable(env); !ok {
			sel.NotApplicable[n] = why
			continue
		}
		sel.Active = append(sel.Active, nem)
	}
	return sel
}
