package spec

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/nodes"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/targets/conform"
)

// Options configure a spec target.
type Options struct {
	// Log receives setup messages (nil: the run's log).
	Log io.Writer
	// NoPreflight skips the conformance preflight in Start (fencecheck
	// conform runs it itself and wants the report, not an error).
	NoPreflight bool
	// StrictContract makes every deviation the preflight finds stop the
	// start, as `fencecheck conform` judges; otherwise only unsafe ones
	// do (conform.Deviation.Unsafe) and the rest are reported.
	StrictContract bool
	// DeferPreflight leaves the preflight out of Start for the harness to
	// run through Preflight, once the history is open, so its requests are
	// recorded there (a run's own phase).
	DeferPreflight bool
	_              struct{}
}

// Target runs the system a spec describes: its nodes are a table of nodes
// (harness/nodes), which carries out every fault by the node's kind (the
// clock moves every started node's processes unless it reads the offset
// file itself or opts out; url nodes are outside every node fault; only
// containers can be partitioned from each other; links between clients and
// nodes are cut, stripped and delayed by the harness's proxies for every
// kind). A spec whose nodes say how to find the leader is a
// nemesis.Leaderer too.
type Target struct {
	*nodes.Cluster
	spec *Spec
	opts Options

	mu        sync.Mutex
	preflight *conform.Report
}

var _ harness.Preflighter = (*Target)(nil)

// leading is a Target whose nodes say which of them leads.
type leading struct{ *Target }

var _ nemesis.Leaderer = leading{}

// Leader implements nemesis.Leaderer: the node whose leader probe says yes.
func (l leading) Leader(ctx context.Context) (string, error) { return l.FindLeader(ctx) }

var _ nemesis.LogPather = (*Target)(nil)

// LogPaths implements nemesis.LogPather: the node's log, as its spec names it.
func (t *Target) LogPaths(node string) []string {
	for _, n := range t.spec.Nodes {
		if n.Name == node {
			return n.Log
		}
	}
	return nil
}

// New returns the target for s, a parsed spec; nothing runs until Start.
func New(s *Spec, opts Options) harness.Target {
	t := &Target{spec: s, opts: opts}
	// The data stays in the run's folder, as evidence.
	t.Cluster = nodes.Must(nodes.New(s.Name, s.ModelSemantics(), s.Table(), nodes.Options{Log: opts.Log, KeepData: true}))
	if t.HasLeader() {
		return leading{t}
	}
	return t
}

// Open loads the spec at path and returns its target.
func Open(path string, opts Options) (harness.Target, error) {
	s, err := Load(path)
	if err != nil {
		return nil, err
	}
	return New(s, opts), nil
}

// Spec is the spec the target runs.
func (t *Target) Spec() *Spec { return t.spec }

func (t *Target) logf(format string, args ...any) {
	w := t.opts.Log
	if w == nil {
		w = t.Env().Log
	}
	if w != nil {
		fmt.Fprintf(w, "spec %s: "+format+"\n", append([]any{t.spec.Name}, args...)...)
	}
}

// Start implements harness.Target: it starts every command and image node,
// waits until every node answers its health, and runs the conformance
// preflight (unless Options.NoPreflight or DeferPreflight): a system that
// breaks the contract fails to start, so a gate stops with "could not run"
// rather than report a verdict on answers it misread.
func (t *Target) Start(ctx context.Context, env harness.Env) (harness.Endpoints, error) {
	eps, err := t.Cluster.Start(ctx, env)
	if err != nil {
		return eps, err
	}
	t.describeFaults()
	if t.opts.NoPreflight || t.opts.DeferPreflight {
		return eps, nil
	}
	rep, err := conform.Check(ctx, eps, conform.Options{Semantics: t.Semantics()})
	t.mu.Lock()
	t.preflight = rep
	t.mu.Unlock()
	if err != nil {
		return harness.Endpoints{}, err
	}
	if t.opts.StrictContract || len(rep.Unsafe()) > 0 {
		if err := rep.Err(); err != nil {
			return harness.Endpoints{}, fmt.Errorf("conformance preflight: %w", err)
		}
	}
	for _, d := range rep.Safe() {
		t.logf("contract deviation (the run goes on: it cannot let a bad token through; --strict-contract stops here): %s", d)
	}
	t.logf("conformance preflight passed (%d checks, %s that cannot let a bad token through)", rep.Checks, conform.CountDeviations(len(rep.Safe())))
	return eps, nil
}

// Preflight implements harness.Preflighter: the conformance preflight with
// every request recorded through record. A deviation that keeps the
// harness from driving the system or classifying its answers is an error
// (the run cannot be carried out), and with StrictContract so is any; a bad
// token's write the system accepted is left to the checkers, which find it
// in the history; the others are returned in words, for the report.
func (t *Target) Preflight(ctx context.Context, record harness.OpRecorder) ([]string, error) {
	rep, err := conform.Check(ctx, t.Endpoints(), conform.Options{Semantics: t.Semantics(), Record: record, Namespace: t.Env().Namespace})
	t.mu.Lock()
	t.preflight = rep
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var blocking []conform.Deviation
	var reported []string
	for _, d := range rep.Deviations {
		switch {
		case t.opts.StrictContract || d.Unsafe && !d.Accepted:
			blocking = append(blocking, d)
		case d.Accepted:
			reported = append(reported, d.String()+" (the write is in the history: the checkers judge it)")
		default:
			reported = append(reported, d.String())
		}
	}
	if len(blocking) > 0 {
		return reported, (&conform.Report{Checks: rep.Checks, Passed: rep.Passed, Deviations: blocking}).Err()
	}
	t.logf("conformance preflight: %d checks, %s reported", rep.Checks, conform.CountDeviations(len(reported)))
	return reported, nil
}

// PreflightReport is the conformance report of the last Start or Preflight (nil when skipped).
func (t *Target) PreflightReport() *conform.Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.preflight
}

// describeFaults says up front which node faults can act, so a user who
// asks for the clock nemesis learns why it does not apply.
func (t *Target) describeFaults() {
	var urls, clocks []string
	unreachable := t.ClockUnreachable()
	for _, sn := range t.spec.Nodes {
		switch {
		case sn.Kind() == KindURL:
			urls = append(urls, sn.Name)
		case sn.ClockOptIn():
			clocks = append(clocks, sn.Name+" (reads the offset file)")
		case !sn.ClockWarped():
			clocks = append(clocks, sn.Name+" (opted out: \"clock\": \"none\")")
		case unreachable[sn.Name] != "":
			clocks = append(clocks, sn.Name+" (cannot be reached: "+unreachable[sn.Name]+")")
		case sn.Kind() == KindImage:
			clocks = append(clocks, sn.Name+" (the container's processes: vDSO patch, preload library)")
		case sn.Kind() == KindSSH:
			clocks = append(clocks, sn.Name+" (the process on its host: vDSO patch)")
		default:
			clocks = append(clocks, sn.Name+" (the process: vDSO patch, and the preload library where gcc built it)")
		}
	}
	if len(urls) > 0 {
		t.logf("url nodes %s are not started by fencecheck: pause, restart and clock do not reach them; client-side faults (holder pause, partition, strip, delay) do", strings.Join(urls, ", "))
	}
	if len(clocks) > 0 {
		t.logf("clock faults: %s", strings.Join(clocks, ", "))
	}
	if len(t.ClockNodes()) == 0 {
		t.logf("no node's clock can be moved: the clock nemesis does not apply")
	}
}
