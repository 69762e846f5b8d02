package harness

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Config is every setting of one run. It is stored in config.json with the
// command that reproduces the run.
type Config struct {
	// Target is the name the target was chosen by (memory, etcd, spec:PATH...).
	Target string `json:"target"`
	// Time is the length of the main phase.
	Time time.Duration `json:"time_ns"`
	// Concurrency is the number of writer clients; Keys the number of
	// lock/resource keys they share.
	Concurrency int `json:"concurrency"`
	Keys        int `json:"keys"`
	// Readers is the number of extra clients that only read.
	Readers int `json:"readers"`
	// TTL is the lease clients ask for.
	TTL time.Duration `json:"ttl_ns"`
	// OpTimeout bounds each client request; past it the op is info.
	OpTimeout time.Duration `json:"op_timeout_ns"`
	// Nemesis is the comma-separated nemesis list ("all", "none").
	Nemesis string `json:"nemesis"`
	// Seed drives every random choice of the workload and the nemeses.
	Seed uint64 `json:"seed"`
	// Store is the root of the run store.
	Store string `json:"store"`
	// Forge adds the forge workload (writes with tokens no issuer signed).
	Forge bool `json:"forge"`
	// Checker is fast, porcupine or both.
	Checker string `json:"checker"`
	// CheckTimeout bounds Porcupine's search per model.
	CheckTimeout time.Duration `json:"check_timeout_ns"`
	// MinOps is the least number of ok operations a run must have to give a
	// verdict other than unknown.
	MinOps int `json:"min_ops"`
	// Recovery bounds the wait for every node to answer after the heal.
	Recovery time.Duration `json:"recovery_ns"`
	// Command is the command line that reproduces this run.
	Command []string `json:"command"`
	// Options holds target-specific settings (bugs, seal key...) for the
	// record.
	Options map[string]any `json:"options,omitempty"`
	// Progress receives live progress lines; nil for none.
	Progress io.Writer `json:"-"`
	// Log receives phase messages; nil for none.
	Log io.Writer `json:"-"`
}

// DefaultTTL is the lease clients ask for when a config does not say.
const DefaultTTL = time.Second

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.Time == 0 {
		c.Time = 30 * time.Second
	}
	if c.Concurrency == 0 {
		c.Concurrency = 5
	}
	if c.Keys == 0 {
		c.Keys = 3
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = time.Second
	}
	if c.Store == "" {
		c.Store = "store"
	}
	if c.Checker == "" {
		c.Checker = "both"
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = 30 * time.Second
	}
	if c.MinOps == 0 {
		c.MinOps = 10
	}
	if c.Recovery == 0 {
		c.Recovery = 30 * time.Second
	}
}

// Validate rejects settings no run can use.
func (c *Config) Validate() error {
	var errs []error
	if c.Time <= 0 {
		errs = append(errs, fmt.Errorf("time must be positive, got %s", c.Time))
	}
	if c.Concurrency < 1 || c.Concurrency > 1000 {
		errs = append(errs, fmt.Errorf("concurrency must be 1..1000, got %d", c.Concurrency))
	}
	if c.Keys < 1 || c.Keys > 10000 {
		errs = append(errs, fmt.Errorf("keys must be 1..10000, got %d", c.Keys))
	}
	if c.Readers < 0 {
		errs = append(errs, fmt.Errorf("readers must be >= 0, got %d", c.Readers))
	}
	if c.TTL < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("ttl must be at least 10ms, got %s", c.TTL))
	}
	if c.OpTimeout <= 0 {
		errs = append(errs, fmt.Errorf("op timeout must be positive, got %s", c.OpTimeout))
	}
	switch c.Checker {
	case "fast", "porcupine", "both":
	default:
		errs = append(errs, fmt.Errorf("checker must be fast, porcupine or both, got %q", c.Checker))
	}
	return errors.Join(errs...)
}
