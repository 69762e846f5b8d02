package docker

import "context"

// RetireHelpers ends node's fault helpers now (for benchmarks of a helper's
// start): the next change starts new ones.
func (r *Runtime) RetireHelpers(ctx context.Context, node string) { r.retireHelpers(ctx, node) }
