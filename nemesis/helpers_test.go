package nemesis

import (
	"context"
	"io"
	"math/rand/v2"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// drawStart draws one fault of n with rng and starts it, as the scheduler
// does, for a nemesis used on its own.
func drawStart(ctx context.Context, n Nemesis, env *Env, rng *rand.Rand) (*Fault, error) {
	p, err := n.Draw(ctx, env, rng)
	if err != nil {
		return nil, err
	}
	return n.Start(ctx, env, p)
}

// attempt is one try of the scheduler's loop: draw n's fault and start it.
// It returns the fault's id, busy, or -1.
func (s *Scheduler) attempt(ctx context.Context, n Nemesis, rng *rand.Rand) int64 {
	id, _ := s.drawAndStart(ctx, n, rng, DefaultTiming, time.Time{})
	return id
}

// ackedRecorder records into w and publishes each acknowledgement it
// records, as the harness wires them for the nemeses that wait on them.
func ackedRecorder(w io.Writer) (*history.Recorder, *history.Acks) {
	rec := history.NewRecorder(w)
	acks := history.NewAcks()
	rec.Listen(acks.Observe)
	return rec, acks
}
