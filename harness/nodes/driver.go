package nodes

import (
	"context"
	"fmt"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// driver carries out, for one kind of node, what the harness does to it:
// the faults are written once per kind, here and in the kind's file.
type driver interface {
	// prepare gives the node the ports it listens on and the host other
	// nodes reach it at, before any node starts.
	prepare(ctx context.Context, m *member) error
	// view is the node's data folder and clock file as the node sees them
	// ("" for none).
	view(m *member) (data, clockFile string)
	// start starts the node: at the start of the run, and after a kill.
	start(ctx context.Context, m *member) error
	running(ctx context.Context, m *member) (bool, error)
	pause(ctx context.Context, m *member) error
	resume(ctx context.Context, m *member) error
	// kill kills the node hard (kill -9) and returns once it is dead.
	kill(ctx context.Context, m *member) error
	// hostAddr is where this machine reaches one of the node's ports.
	hostAddr(m *member, port string) (string, error)
	// moveClock moves the clock of ClockProcesses and ClockInjected nodes;
	// clockReach says why it cannot ("" when it can).
	moveClock(ctx context.Context, m *member, offset time.Duration) error
	clockReach(ctx context.Context, m *member) string
	// afterStart runs once a restarted node answers (a process's clock is
	// patched again into its new programs).
	afterStart(m *member) error
	// cutWhy says why the node cannot be placed in a partition group ("":
	// it can); cut drops the node's traffic with the both peers, and the
	// connections it opens to the to peers (one way: theirs to it carry
	// on), replacing its earlier cut.
	cutWhy(m *member) string
	cut(ctx context.Context, m *member, both, to []*member) error
	// healCuts lifts every cut the driver made.
	healCuts(ctx context.Context) error
	// layerWhy says why a lazyfs layer over the node's data would not
	// reach it ("" when it would); newLayer puts its data on one.
	layerWhy(m *member) string
	newLayer(m *member) (disk, error)
	// wipe empties the stopped node's data and writes its files again.
	wipe(ctx context.Context, m *member) error
}

// disk is the lazyfs layer under a node's data, on this machine
// (*lazyfs.Mount) or on the node's host.
type disk interface {
	// Dir is where the node works (the mount point).
	Dir() string
	PowerLoss() (lazyfs.Loss, error)
	Unmount() error
}

// unreachable is the driver of url nodes, and the base of the others: a
// node fencecheck did not start takes no fault of its own.
type unreachable struct{}

var errNotStarted = fmt.Errorf("a url node is not started by fencecheck")

func (unreachable) prepare(context.Context, *member) error         { return nil }
func (unreachable) view(*member) (string, string)                  { return "", "" }
func (unreachable) start(context.Context, *member) error           { return errNotStarted }
func (unreachable) running(context.Context, *member) (bool, error) { return false, errNotStarted }
func (unreachable) pause(context.Context, *member) error           { return errNotStarted }
func (unreachable) resume(context.Context, *member) error          { return errNotStarted }
func (unreachable) kill(context.Context, *member) error            { return errNotStarted }
func (unreachable) hostAddr(m *member, port string) (string, error) {
	if h := urlHost(m.URL); h != "" && port == "" {
		return h, nil
	}
	return "", fmt.Errorf("node %s: no port %q this machine can reach", m.Name, port)
}
func (unreachable) moveClock(context.Context, *member, time.Duration) error { return errNotStarted }
func (unreachable) clockReach(context.Context, *member) string {
	return "a url node, not started by fencecheck"
}
func (unreachable) afterStart(*member) error { return nil }
func (unreachable) cutWhy(m *member) string {
	return fmt.Sprintf("node %s is a %s node: only containers and ssh hosts can be partitioned (the proxies cut clients from any node)", m.Name, m.Kind())
}
func (unreachable) cut(_ context.Context, m *member, _, _ []*member) error {
	return fmt.Errorf("%s", unreachable{}.cutWhy(m))
}
func (unreachable) healCuts(context.Context) error { return nil }
func (unreachable) layerWhy(*member) string        { return "a url node is not started by fencecheck" }
func (unreachable) newLayer(m *member) (disk, error) {
	return nil, fmt.Errorf("node %s: %s", m.Name, unreachable{}.layerWhy(m))
}
func (unreachable) wipe(_ context.Context, m *member) error { return wipe(m) }
