package docker

import "context"

// RetireHelpers ends node's fault helpers now (for benchmarks of a helper's
// start): the next change starts new ones.
func (r *Runtime) RetireHelpers(ctx context.Context, node string) { r.retireHelpers(ctx, node) }

// OnCutRead calls f where a start has read its node's cut and not yet put
// it in, until the returned func restores the default.
func OnCutRead(f func(node string)) (restore func()) {
	old := cutRead
	cutRead = f
	return func() { cutRead = old }
}
