package timewarp

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Scope lists the pids of one node's processes (its process group, its
// container's PID namespace, ...). It is asked again at every change, so
// processes that appear later are found.
type Scope func() ([]int, error)

// GroupOptions tune a Group.
type GroupOptions struct {
	Inject Options
	// Also moves the node's other clocks with the patch (the preload
	// library's offset file); it is called at every SetOffset, after the
	// patched processes have the new offset.
	Also func(offset time.Duration) error
	_    struct{}
}

// Group keeps one node's processes at one offset from real time: the
// offset is held here (one fact, one place), every process in scope is
// patched when the offset is first set, and Sync gives processes that
// appear later (a restarted node, a child started meanwhile) the offset in
// force. Safe for concurrent use.
type Group struct {
	mu     sync.Mutex
	scope  Scope
	opts   GroupOptions
	offset time.Duration
	armed  bool // SetOffset was called
	procs  map[int]*member
}

type member struct {
	start uint64
	proc  *Process // nil when reached through the preload only
}

// Report says what one change reached.
type Report struct {
	// Processes are the processes in scope that carry the offset.
	Processes int
	// Injected counts the processes patched by this change (their first
	// patch costs a stop of every thread; later changes are a write).
	Injected int
	// PreloadOnly counts processes whose patch failed but whose libc
	// calls the preload library shifts.
	PreloadOnly int
}

// NewGroup returns a group at real time that has touched nothing yet.
func NewGroup(scope Scope, opts GroupOptions) *Group {
	return &Group{scope: scope, opts: opts, procs: map[int]*member{}}
}

// SetScope replaces the scope (e.g. a restarted container's new PID).
func (g *Group) SetScope(s Scope) {
	g.mu.Lock()
	g.scope = s
	g.mu.Unlock()
}

// Offset is the offset in force.
func (g *Group) Offset() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.offset
}

// SetOffset moves every process in scope to offset from real time,
// patching those not patched yet. A node with no process right now (it is
// restarting) is no error: its processes get the offset at Sync.
func (g *Group) SetOffset(offset time.Duration) (Report, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offset, g.armed = offset, true
	// The patched processes first: a memory write each, seen at once; the
	// preload's file (which may be fsynced) after.
	rep, err := g.apply()
	if g.opts.Also != nil {
		err = errors.Join(err, g.opts.Also(offset))
	}
	return rep, err
}

// Sync patches the processes in scope that are not patched yet with the
// offset in force: a node's start hook. At real time it does nothing (a run
// without clock faults never stops a thread; the next SetOffset patches).
func (g *Group) Sync() (Report, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.armed || g.offset == 0 {
		return Report{}, nil
	}
	return g.apply()
}

// Close releases the handles (the processes keep their patches).
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pid, m := range g.procs {
		if m.proc != nil {
			m.proc.Close()
		}
		delete(g.procs, pid)
	}
	return nil
}

func (g *Group) apply() (Report, error) {
	var rep Report
	pids, err := g.scope()
	if err != nil {
		return rep, fmt.Errorf("listing the node's processes: %w", err)
	}
	inScope := map[int]bool{}
	var errs []string
	for _, pid := range pids {
		inScope[pid] = true
		st, err := startTime(pid)
		if err != nil {
			continue // gone
		}
		m := g.procs[pid]
		if m != nil && m.start != st {
			if m.proc != nil {
				m.proc.Close()
			}
			m = nil // another process got the pid
		}
		if m == nil {
			p, err := Inject(pid, g.opts.Inject)
			switch {
			case err == nil:
				m = &member{start: st, proc: p}
				rep.Injected++
			case Preloaded(pid, PreloadName):
				m = &member{start: st}
			default:
				if exitedSince(pid, st) {
					continue // it exited meanwhile
				}
				errs = append(errs, fmt.Sprintf("pid %d: %v", pid, err))
				continue
			}
			g.procs[pid] = m
		}
		if m.proc == nil {
			rep.PreloadOnly++
			rep.Processes++
			continue
		}
		err = m.proc.SetOffset(g.offset)
		if err != nil && m.proc.Alive() {
			// The same process, but its memory is not the one patched: it
			// exec'd another program since (a launcher such as a pyenv
			// shim, a shell's exec). The new image needs its own patch.
			m.proc.Close()
			var p *Process
			if p, err = Inject(pid, g.opts.Inject); err == nil {
				m.proc = p
				rep.Injected++
				err = p.SetOffset(g.offset)
			} else {
				delete(g.procs, pid)
			}
		}
		if err != nil {
			if exitedSince(pid, st) {
				delete(g.procs, pid)
				continue // it exited meanwhile
			}
			errs = append(errs, fmt.Sprintf("pid %d: %v", pid, err))
			continue
		}
		rep.Processes++
	}
	for pid, m := range g.procs {
		if !inScope[pid] {
			if m.proc != nil {
				m.proc.Close()
			}
			delete(g.procs, pid)
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return rep, fmt.Errorf("the clock of %d of %d processes could not be moved: %s", len(errs), len(errs)+rep.Processes, strings.Join(errs, "; "))
	}
	return rep, nil
}

// exitedSince says whether the process with pid and start time st is gone or
// going: another process has the pid, or it is a zombie or exiting (it was
// live when the scope was listed; ptrace then refuses it with EPERM, which
// is no failure of the fault).
func exitedSince(pid int, st uint64) bool {
	st2, err := startTime(pid)
	return err != nil || st2 != st || !live(pid)
}
