// Package targets is the table of fencing systems fencecheck can test, by
// name. Adding a target is adding one line here.
package targets

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/harness"
)

// Options are the target settings a user can give on the command line.
type Options struct {
	// Bugs are the reference's bug switches (memory target only).
	Bugs []string
	// SealKey makes the reference authenticate tokens.
	SealKey string
	// Log receives setup messages.
	Log io.Writer
}

type entry struct {
	describe string
	make     func(opts Options) (harness.Target, error)
}

var table = map[string]entry{}

// register adds a target; called from the files that wire each target.
func register(name, describe string, mk func(Options) (harness.Target, error)) {
	table[name] = entry{describe: describe, make: mk}
}

// specPrefix selects a target described by a spec file: spec:PATH.
const specPrefix = "spec:"

// specTarget is set by the spec wiring (targets/spec).
var specTarget func(path string, opts Options) (harness.Target, error)

// New returns the target called name.
func New(name string, opts Options) (harness.Target, error) {
	if path, ok := strings.CutPrefix(name, specPrefix); ok {
		if specTarget == nil {
			return nil, fmt.Errorf("spec targets are not available in this build")
		}
		if path == "" {
			return nil, fmt.Errorf("spec target needs a file: spec:PATH")
		}
		return specTarget(path, opts)
	}
	e, ok := table[name]
	if !ok {
		return nil, fmt.Errorf("unknown target %q (known: %s, spec:FILE)", name, strings.Join(Names(), ", "))
	}
	if len(opts.Bugs) > 0 && name != "memory" {
		return nil, fmt.Errorf("--bug applies to the memory reference only, not %s", name)
	}
	return e.make(opts)
}

// Names lists the built-in targets, sorted.
func Names() []string {
	var out []string
	for n := range table {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Describe returns a one-line description of a built-in target.
func Describe(name string) string { return table[name].describe }
