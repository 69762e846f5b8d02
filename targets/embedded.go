package targets

import (
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/targets/memory"
)

func init() {
	register("memory", "the reference fencing server, embedded in this process (no Docker); --bug switches break it on purpose",
		func(o Options) (harness.Target, error) {
			return memory.NewTarget(memory.TargetOptions{Bugs: o.Bugs, SealKey: o.SealKey})
		})
}
