package gate

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/targets"
	"github.com/fencecheck/fencecheck/targets/conform"
)

// ConformConfig is one conformance check of a target.
type ConformConfig struct {
	// Target, Bugs and SealKey choose the target as in Config.
	Target  string
	Bugs    []string
	SealKey string
	// Timeout bounds each request (0: conform.DefaultTimeout).
	Timeout time.Duration
	// Keep keeps the folder with the nodes' logs and data (it is kept
	// anyway when the target does not start or deviates, unless it holds
	// nothing: a url node's start leaves no logs).
	Keep bool
	Log  io.Writer
	// Progress, when set, gets the status line of long waits (a node's
	// start-up: harness.Status).
	Progress io.Writer
	_        struct{}
}

// Conform starts the target, runs the conformance preflight against it and
// stops it. The error is set only when the check could not be made: a bad
// config (IsUsage) or a target that did not start (ExitCannot). dir is the
// folder with the nodes' logs, "" when it was removed (a conformant target's
// without Keep, and any that holds no file).
func Conform(ctx context.Context, cfg ConformConfig) (rep *conform.Report, dir string, err error) {
	if cfg.Target == "" {
		cfg.Target = harness.Default().Target
	}
	// The preflight is what is asked for: the report, not Start's error.
	target, err := targets.NewWithoutPreflight(harness.Config{Target: cfg.Target, Bugs: cfg.Bugs, SealKey: cfg.SealKey})
	if err != nil {
		return nil, "", &usageError{err}
	}
	sweepLeftovers(cfg.Log, "")
	dir, err = os.MkdirTemp("", "fencecheck-conform-*")
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", harness.ErrCannotRun, err)
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	status := harness.StartStatus(cfg.Progress, "setup")
	env := harness.Env{RunID: "conform-" + filepath.Base(dir)[len("fencecheck-conform-"):], Dir: dir, Log: status.Log(log)}
	eps, err := target.Start(status.Context(ctx), env)
	status.End()
	stop := func() {
		if serr := target.Stop(context.WithoutCancel(ctx)); serr != nil {
			fmt.Fprintf(log, "conform: stopping %s: %v\n", cfg.Target, serr)
		}
		if !harness.HoldsFiles(dir) || err == nil && rep.Conformant() && !cfg.Keep {
			os.RemoveAll(dir)
			dir = ""
		}
	}
	if err != nil {
		stop()
		why := fmt.Errorf("%w: target %s did not start: %v", harness.ErrCannotRun, target.Name(), err)
		if dir != "" {
			why = fmt.Errorf("%w: target %s did not start (logs in %s): %v", harness.ErrCannotRun, target.Name(), dir, err)
		}
		return nil, dir, why
	}
	rep, err = conform.Check(ctx, eps, conform.Options{Semantics: target.Semantics(), Timeout: cfg.Timeout})
	stop()
	return rep, dir, err
}
