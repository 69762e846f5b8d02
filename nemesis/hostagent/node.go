package hostagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/procgroup"
	"github.com/fencecheck/fencecheck/nemesis/timewarp"
)

// node is one node's state on the host: its folders, its program, its
// layer and its clock.
type node struct {
	a    *agent
	name string

	mu    sync.Mutex
	files map[string]string
	disk  *lazyfs.Mount
	// mountDir is the mount point the agent was given ("" for its own).
	mountDir string
	proc     *procgroup.Group
	log      *os.File
	clock    *timewarp.Group
}

func newNode(a *agent, name string) *node {
	n := &node{a: a, name: name}
	n.clock = timewarp.NewGroup(func() ([]int, error) {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p == nil || p.Exited() {
			return nil, nil // not running: its start applies the offset
		}
		return timewarp.ProcessGroup(p.PGID())()
	}, timewarp.GroupOptions{})
	return n
}

func (n *node) dir() string       { return filepath.Join(n.a.opts.Dir, "nodes", n.name) }
func (n *node) dataDir() string   { return filepath.Join(n.dir(), "data") }
func (n *node) clockFile() string { return filepath.Join(n.dir(), "clock", "offset") }
func (n *node) logPath() string   { return filepath.Join(n.a.opts.Dir, "logs", n.name+".log") }

// workDir is the folder the program works in: the layer when there is one.
func (n *node) workDir() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.disk != nil {
		return n.disk.Dir()
	}
	return n.dataDir()
}

func (n *node) do(req Request) Response {
	var err error
	resp := Response{}
	switch req.Op {
	case OpPrepare:
		resp.Data, resp.ClockFile, err = n.prepare(req.Files, req.ClockFile)
	case OpLayer:
		resp.Data, err = n.layer(req.Backing, req.Mount)
	case OpStart:
		resp.PGID, err = n.start(req.Argv, req.Env, req.Dir)
	case OpRunning:
		resp.Running, resp.Status = n.running()
	case OpSignal:
		err = n.signal(req.Signal)
	case OpKill:
		err = n.kill()
	case OpTerminate:
		err = n.terminate(req.Grace)
	case OpWipe:
		err = n.wipe()
	case OpPowerLoss:
		resp.Loss, err = n.powerLoss(req.Crash)
	case OpPending:
		var d *lazyfs.Mount
		if d, err = n.layerOf(); err == nil {
			resp.Loss = d.Pending()
		}
	case OpArmCut:
		var d *lazyfs.Mount
		if d, err = n.layerOf(); err == nil {
			err = d.ArmCut(req.Window)
		}
	case OpDiskFaults:
		var d *lazyfs.Mount
		if d, err = n.layerOf(); err == nil && req.Faults != nil {
			d.SetFaults(*req.Faults)
		}
	case OpCorrupt:
		var d *lazyfs.Mount
		if d, err = n.layerOf(); err == nil && req.Corruption != nil {
			var c lazyfs.Corrupted
			c, err = d.Corrupt(*req.Corruption)
			resp.Corrupted = &c
		}
	case OpUnmount:
		err = n.unmount()
	case OpClock:
		var rep timewarp.Report
		rep, err = n.clock.SetOffset(req.Offset)
		resp.Processes, resp.Injected = rep.Processes, rep.Injected
	case OpClockSync:
		var rep timewarp.Report
		rep, err = n.clock.Sync()
		resp.Processes, resp.Injected = rep.Processes, rep.Injected
	case OpClockReach:
		resp.Why = n.clockReach()
	case OpClockFile:
		err = timewarp.SetPreloadOffset(n.clockFile(), req.Offset)
	case OpTail:
		resp.Text = Tail(n.logPath(), req.Lines)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	resp.Error = errText(err)
	return resp
}

// prepare makes the node's folders and its files (ZooKeeper's myid), and
// its offset file at 0.
func (n *node) prepare(files map[string]string, clockFile bool) (data, clock string, err error) {
	if err := os.MkdirAll(n.dataDir(), 0o755); err != nil {
		return "", "", err
	}
	n.mu.Lock()
	n.files = files
	n.mu.Unlock()
	if err := WriteFiles(n.dataDir(), files); err != nil {
		return "", "", err
	}
	if clockFile {
		if err := os.MkdirAll(filepath.Dir(n.clockFile()), 0o755); err != nil {
			return "", "", err
		}
		if err := fencing.WriteClockOffset(n.clockFile(), 0); err != nil {
			return "", "", err
		}
		clock = n.clockFile()
	}
	return n.dataDir(), clock, nil
}

// layer puts the node's data on the lazyfs layer (before its first start):
// its own folders, or backing and mount when given (a local agent's).
func (n *node) layer(backing, mount string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.disk != nil {
		return n.disk.Dir(), nil
	}
	if (backing == "") != (mount == "") {
		return "", fmt.Errorf("node %s: a layer needs both a backing folder and a mount point, or neither", n.name)
	}
	if backing == "" {
		backing, mount = n.dataDir(), filepath.Join(n.dir(), "mnt")
	} else {
		n.mountDir = mount
	}
	d, err := lazyfs.New(backing, mount, lazyfs.Options{})
	if err != nil {
		return "", err
	}
	n.disk = d
	return d.Dir(), nil
}

// layerOf is the node's layer, or why it has none.
func (n *node) layerOf() (*lazyfs.Mount, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.disk == nil {
		return nil, fmt.Errorf("node %s's data is not on the lazyfs layer", n.name)
	}
	return n.disk, nil
}

// start (re)starts the node's program in its own group, its output
// appended to its log, with the offset in force (best effort: the try once
// the node answers, clock-sync, is the one that counts).
func (n *node) start(argv, env []string, dir string) (int, error) {
	n.mu.Lock()
	if n.proc != nil && !n.proc.Exited() {
		n.mu.Unlock()
		return 0, fmt.Errorf("node %s already runs (pid %d)", n.name, n.proc.PGID())
	}
	if n.log == nil {
		f, err := os.OpenFile(n.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			n.mu.Unlock()
			return 0, err
		}
		n.log = f
	}
	logf := n.log
	n.mu.Unlock()
	// Never the layer itself: between fork and exec the child holds the
	// agent's /dev/fuse open, and a child that waits there on the layer
	// (its chdir) while the agent dies waits forever on a connection it
	// keeps alive itself. The program reaches its data by {data}.
	if dir == "" {
		dir = n.dir()
	}
	fmt.Fprintf(logf, "=== fencehost %s: starting %s: %s\n", stamp(), n.name, strings.Join(argv, " "))
	p, err := procgroup.Start(argv, dir, append(os.Environ(), env...), logf, nil)
	if err != nil {
		return 0, err
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	go func() {
		<-p.Done()
		how := "exited on its own"
		if p.ExpectedExit() {
			how = "killed by fencecheck"
		}
		fmt.Fprintf(logf, "=== fencehost %s: %s %s: %s\n", stamp(), n.name, how, p.Status())
	}()
	_, _ = n.clock.Sync()
	return p.PGID(), nil
}

func stamp() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func (n *node) group() (*procgroup.Group, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil, fmt.Errorf("node %s was never started", n.name)
	}
	return n.proc, nil
}

func (n *node) running() (bool, string) {
	p, err := n.group()
	if err != nil {
		return false, err.Error()
	}
	if p.Exited() {
		return false, p.Status()
	}
	return true, "running"
}

func (n *node) signal(name string) error {
	p, err := n.group()
	if err != nil {
		return err
	}
	// The answer comes once the kernel says the pause is in force (or
	// over): a fault is proven by its effect.
	switch name {
	case "STOP":
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		return p.WaitState(true, 5*time.Second)
	case "CONT":
		if err := p.Signal(syscall.SIGCONT); err != nil {
			return err
		}
		return p.WaitState(false, 5*time.Second)
	}
	return fmt.Errorf("signal %q is not STOP or CONT", name)
}

func (n *node) kill() error {
	p, err := n.group()
	if err != nil {
		return err
	}
	return p.Kill(10 * time.Second)
}

func (n *node) terminate(grace time.Duration) error {
	p, err := n.group()
	if err != nil {
		return nil // never started: nothing to stop
	}
	if grace <= 0 {
		grace = 3 * time.Second
	}
	return p.Terminate(grace)
}

// wipe empties the (stopped) node's data and writes its files again.
func (n *node) wipe() error {
	n.mu.Lock()
	files := n.files
	n.mu.Unlock()
	return Wipe(n.workDir(), files)
}

// powerLoss drops what the (killed) node never made durable, or what the
// crash state chooses of it.
func (n *node) powerLoss(cs *lazyfs.CrashState) (lazyfs.Loss, error) {
	d, err := n.layerOf()
	if err != nil {
		return lazyfs.Loss{}, err
	}
	if cs != nil {
		return d.PowerLossAs(*cs)
	}
	return d.PowerLoss()
}

// unmount takes the layer down, and removes a mount point the agent was
// given (empty once unmounted: the run's folder must not keep it).
func (n *node) unmount() error {
	n.mu.Lock()
	d, mount := n.disk, n.mountDir
	n.mu.Unlock()
	if d == nil {
		return nil
	}
	err := d.Unmount()
	if err == nil && mount != "" {
		if rerr := os.Remove(mount); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = rerr
		}
	}
	return err
}

// clockReach says why the group's processes cannot be patched ("": they
// can).
func (n *node) clockReach() string {
	p, err := n.group()
	if err != nil {
		return "not running"
	}
	if err := timewarp.Reachable(p.PGID()); err != nil {
		return err.Error()
	}
	return ""
}

// end puts the node back as it was before the run: its program continued
// and killed (then no clock of its is left to put back), its layer down.
func (n *node) end() error {
	var errs []error
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p != nil {
		if !p.Exited() {
			_ = p.Signal(syscall.SIGCONT)
		}
		if err := p.Kill(10 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.name, err))
			// A program that outlives its kill keeps real time at least.
			if _, err := n.clock.SetOffset(0); err != nil {
				errs = append(errs, fmt.Errorf("node %s: clock back to real time: %w", n.name, err))
			}
		}
	}
	n.clock.Close()
	errs = append(errs, n.unmount())
	n.mu.Lock()
	if n.log != nil {
		n.log.Close()
		n.log = nil
	}
	n.mu.Unlock()
	return errors.Join(errs...)
}
