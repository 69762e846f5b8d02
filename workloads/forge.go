package workloads

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// ForgeConfig shapes the forge workload.
type ForgeConfig struct {
	// Resources are the connections the forger writes through.
	Resources []Conn
	// Keys is the number of keys it writes ("forge-0".."forge-N-1"); its
	// own keys, so forged writes never block the honest clients' keys.
	Keys int
	// Namespace scopes its keys and values, as Config.Namespace does.
	Namespace string
	OpTimeout time.Duration
	Seed      uint64
	// Processes is the run's process allocator (Fenced.Processes()), so the
	// forger's process numbers never collide with the other clients'.
	Processes *Processes
	// Pause is the mean time between two forged writes.
	Pause time.Duration
}

// ForgeBase is where forged token numbers start: far above any counter and
// any wall-clock millisecond timestamp, so no issuer ever returned them.
const ForgeBase uint64 = 1_000_000_000_000_000

// Forge writes with tokens no issuer handed out: large numbers, without a
// seal or with a made-up one, and never acquires a lock. An authenticating
// resource must reject them (403); an unauthenticated one accepts them, which
// the checker reports as a finding ("tokens are not authenticated"), not a
// violation.
type Forge struct {
	cfg ForgeConfig
	seq int64
}

// NewForge validates cfg and returns the workload.
func NewForge(cfg ForgeConfig) (*Forge, error) {
	if len(cfg.Resources) == 0 {
		return nil, fmt.Errorf("forge workload needs a resource endpoint")
	}
	if cfg.Processes == nil {
		return nil, fmt.Errorf("forge workload needs the run's process allocator")
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 3
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = time.Second
	}
	if cfg.Pause <= 0 {
		cfg.Pause = 100 * time.Millisecond
	}
	return &Forge{cfg: cfg}, nil
}

// ForgeKey names the forger's i-th key.
func ForgeKey(i int) string { return fmt.Sprintf("forge-%d", i) }

// Run writes forged tokens until ctx ends.
func (f *Forge) Run(ctx context.Context, rec *history.Recorder) error {
	// Its own stream, apart from the honest clients' (Fenced.rng uses
	// stream worker+1).
	rng := rand.New(rand.NewPCG(f.cfg.Seed, 0xf0f0))
	r := newRecorder(rec, f.cfg.Processes, f.cfg.OpTimeout)
	for i := 0; ctx.Err() == nil; i++ {
		key := Scoped(f.cfg.Namespace, ForgeKey(rng.IntN(f.cfg.Keys)))
		token := f.token(rng)
		// Values are unique across the run: "forge-N" never repeats and
		// differs from the honest clients' "cP-N".
		f.seq++
		v := Scoped(f.cfg.Namespace, fmt.Sprintf("forge-%d", f.seq))
		res := f.cfg.Resources[i%len(f.cfg.Resources)]
		r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: res.Node()},
			func(c context.Context) Reply { return res.Write(c, key, token, []byte(v)) })
		sleepCtx(ctx, f.cfg.Pause/2+time.Duration(rng.Int64N(int64(f.cfg.Pause)+1)))
	}
	return nil
}

// token makes a forged token: an ever larger number (so an unauthenticated
// resource keeps accepting them), without a seal three times in four, or with
// a seal of the right shape that no key made.
func (f *Forge) token(rng *rand.Rand) string {
	n := ForgeBase + uint64(f.seq+1)*1000 + uint64(rng.IntN(1000))
	if rng.IntN(4) == 0 {
		return fmt.Sprintf("%d.%016x%016x%016x%016x", n, rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64())
	}
	return fmt.Sprint(n)
}
