package targets

import (
	"errors"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/targets/spec"
)

// spec:PATH runs the system a spec file describes (targets/spec).
func init() {
	specTarget = func(path string, opts Options) (harness.Target, error) {
		if len(opts.Bugs) > 0 || opts.SealKey != "" {
			return nil, errors.New("--bug and --seal-key apply to the memory reference only; a spec's system is configured by its spec")
		}
		return spec.Open(path, spec.Options{Log: opts.Log})
	}
}
