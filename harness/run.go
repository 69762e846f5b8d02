package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/reports"
	"github.com/fencecheck/fencecheck/workloads"
)

// ErrCannotRun wraps every failure that kept the run from being carried out
// (target did not start, store not writable): exit code 3.
var ErrCannotRun = errors.New("the run could not be carried out")

// Run is one finished run.
type Run struct {
	Config Config
	// Dir is the run's store folder.
	Dir string
	// HistoryPath is Dir/history.jsonl.
	HistoryPath string
	Start, End  time.Time
	// Nemeses lists the nemeses that acted, with how often; NotApplicable
	// those requested that could not act on this target, with why.
	Nemeses       map[string]*nemesis.Count
	NotApplicable map[string]string
	// Endpoints the clients used.
	Endpoints Endpoints
	// RunError is a problem during the run that did not stop it (heal
	// failed, recovery timed out); reported beside the verdict.
	RunErrors []string
}

// Execute carries out one run against target: setup, main phase (workload and
// nemeses), heal, recovery, final reads, teardown. It returns once the
// history is complete on disk; checking and reporting follow (Check).
func Execute(ctx context.Context, cfg Config, target Target) (*Run, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	run := &Run{Config: cfg, Start: time.Now()}
	dir, err := newRunDir(cfg.Store, target.Name(), run.Start)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	run.Dir = dir
	run.HistoryPath = filepath.Join(dir, "history.jsonl")
	if err := writeJSON(filepath.Join(dir, "config.json"), storedConfig(cfg, target)); err != nil {
		return run, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	logf("setup: starting target %s (run folder %s)", target.Name(), dir)
	runID := reports.TargetDirName(target.Name()) + "-" + filepath.Base(dir)
	env := Env{RunID: runID, Dir: dir, Log: orDiscard(cfg.Log)}
	eps, err := target.Start(ctx, env)
	// Stop always runs: a target that half-started must still clean up.
	defer func() {
		logf("teardown: stopping target")
		if err := target.Stop(context.WithoutCancel(ctx)); err != nil {
			logf("teardown: %v", err)
		}
	}()
	if err != nil {
		return run, fmt.Errorf("%w: target %s did not start: %v", ErrCannotRun, target.Name(), err)
	}
	run.Endpoints = eps

	// The history starts once the target is up: its time 0 is the start of
	// the workload, so times (and time to detection) do not count setup.
	rec, err := history.Create(run.HistoryPath)
	if err != nil {
		return run, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	defer rec.Close()

	nemNames, err := nemesis.Parse(cfg.Nemesis)
	if err != nil {
		return run, err
	}
	links, linkedEps, err := interpose(rec, cfg, eps, nemNames)
	if err != nil {
		return run, fmt.Errorf("%w: %v", ErrCannotRun, err)
	}
	var linkEnv any
	if links != nil {
		defer links.Close()
		linkEnv = links
	}

	wl, err := workloads.NewFenced(workloads.Config{
		Clients: cfg.Concurrency, Readers: cfg.Readers, Keys: cfg.Keys, TTL: cfg.TTL,
		OpTimeout: cfg.OpTimeout, Seed: cfg.Seed,
		Issuers: conns(linkedEps.Issuers), Resources: conns(linkedEps.Resources),
	})
	if err != nil {
		return run, err
	}
	nenv := &nemesis.Env{Target: target, Workload: wl, Links: linkEnv, TTL: cfg.TTL, Log: orDiscard(cfg.Log)}
	sel := nemesis.Select(nemNames, nenv)
	run.NotApplicable = sel.NotApplicable
	for n, why := range sel.NotApplicable {
		logf("nemesis %s does not apply to %s: %s", n, target.Name(), why)
	}
	sched := nemesis.NewScheduler(nenv, rec, cfg.Seed, sel.Active)
	run.Nemeses = sched.Counts

	prog := newProgress(cfg.Progress, cfg.Time, sched.Active)
	rec.Listen(prog.observe)
	names := make([]string, 0, len(sel.Active))
	for _, n := range sel.Active {
		names = append(names, n.Name())
	}
	sort.Strings(names)
	logf("main phase: %s, %d clients on %d keys, nemeses %v, seed %d", cfg.Time, cfg.Concurrency, cfg.Keys, names, cfg.Seed)
	prog.run()
	mainCtx, cancel := context.WithTimeout(ctx, cfg.Time)
	g, gctx := errgroup.WithContext(mainCtx)
	g.Go(func() error { return wl.Run(gctx, rec) })
	if cfg.Forge {
		g.Go(func() error { return runForge(gctx, rec, wl, linkedEps, cfg) })
	}
	g.Go(func() error { sched.Run(gctx); return nil })
	werr := g.Wait()
	cancel()
	prog.finish()
	if werr != nil && !errors.Is(werr, context.Canceled) && !errors.Is(werr, context.DeadlineExceeded) {
		run.RunErrors = append(run.RunErrors, "workload: "+werr.Error())
	}

	// The final phase runs even if the caller was cancelled: faults must be
	// healed and the final state read so the history can be checked.
	fctx := context.WithoutCancel(ctx)
	logf("final phase: heal, recover, read every key")
	if err := sched.Heal(fctx); err != nil {
		run.RunErrors = append(run.RunErrors, err.Error())
		logf("%v", err)
	}
	if err := WaitHealthy(fctx, eps, cfg.Recovery); err != nil {
		run.RunErrors = append(run.RunErrors, "recovery: "+err.Error())
		logf("recovery: %v", err)
	}
	rctx, rcancel := context.WithTimeout(fctx, cfg.Recovery)
	_ = wl.FinalReads(rctx, rec)
	rcancel()
	run.End = time.Now()
	if err := rec.Close(); err != nil {
		return run, fmt.Errorf("%w: history: %v", ErrCannotRun, err)
	}
	return run, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// newRunDir makes STORE/<target>/<timestamp>/ and points STORE/latest at it.
func newRunDir(store, target string, t time.Time) (string, error) {
	dir, err := reports.NewRunDir(store, target, t)
	if err != nil {
		return "", err
	}
	return dir, reports.UpdateLatest(store, dir)
}

type configRecord struct {
	Config
	TargetName string `json:"target_name"`
	Semantics  any    `json:"semantics"`
	Version    int    `json:"config_version"`
}

func storedConfig(cfg Config, t Target) configRecord {
	return configRecord{Config: cfg, TargetName: t.Name(), Semantics: t.Semantics(), Version: 1}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
