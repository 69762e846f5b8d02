package nodes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/harness/sweep"
	"github.com/fencecheck/fencecheck/nemesis/hostagent"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// localLayers serve the layers of the nodes whose data is on this machine
// (in process, process, container) from one local agent per run
// (hostagent.StartLocal), never from fencecheck's own process: a kill -9 of
// fencecheck at any moment, an fsync of the embedded reference in flight
// included, then leaves no thread in D and no mount behind.
type localLayers struct {
	c *Cluster

	mu    sync.Mutex
	agent *hostagent.Local
}

// layerCallWait bounds one call to the agent: a power loss waits up to
// 10 s for the kernel to close the old connection (lazyfs.unmountWait).
const layerCallWait = time.Minute

// mount puts m's data folder on a layer served by the run's local agent,
// started on first use.
func (l *localLayers) mount(m *member) (disk, error) {
	a, err := l.start()
	if err != nil {
		return nil, err
	}
	d := &agentDisk{a: a.Client, node: m.Name}
	resp, err := d.call(hostagent.Request{Op: hostagent.OpLayer, Backing: m.dataDir(), Mount: filepath.Join(m.dir, "mnt")})
	if err != nil {
		return nil, err
	}
	d.dir = resp.Data
	return d, nil
}

func (l *localLayers) start() (*hostagent.Local, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.agent != nil {
		return l.agent, nil
	}
	env := l.c.Env()
	logf, err := os.OpenFile(filepath.Join(env.Dir, "layer-agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the agent holds its own copy
	a, err := hostagent.StartLocal(context.Background(), hostagent.LocalOptions{Run: env.RunID, Dir: filepath.Join(env.Dir, sweep.LayerAgentDir), Log: logf})
	if err != nil {
		return nil, fmt.Errorf("power-loss layers: %w", err)
	}
	l.agent = a
	return a, nil
}

// close takes every layer down and ends the agent (after the nodes that
// used the layers are stopped).
func (l *localLayers) close() error {
	l.mu.Lock()
	a := l.agent
	l.agent = nil
	l.mu.Unlock()
	if a == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), layerCallWait)
	defer cancel()
	return a.Stop(ctx)
}

// agentDisk is a layer served by an agent: the local one, for every fault
// the layer has.
type agentDisk struct {
	a         *hostagent.Client
	node, dir string
}

var _ localDisk = (*agentDisk)(nil)

func (d *agentDisk) call(req hostagent.Request) (hostagent.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), layerCallWait)
	defer cancel()
	req.Node = d.node
	return d.a.Call(ctx, req)
}

func (d *agentDisk) Dir() string { return d.dir }

func (d *agentDisk) PowerLoss() (lazyfs.Loss, error) {
	resp, err := d.call(hostagent.Request{Op: hostagent.OpPowerLoss})
	return resp.Loss, err
}

func (d *agentDisk) PowerLossAs(cs lazyfs.CrashState) (lazyfs.Loss, error) {
	resp, err := d.call(hostagent.Request{Op: hostagent.OpPowerLoss, Crash: &cs})
	return resp.Loss, err
}

// ArmCut arms a power cut at the next fsync within window.
func (d *agentDisk) ArmCut(window time.Duration) error {
	_, err := d.call(hostagent.Request{Op: hostagent.OpArmCut, Window: window})
	return err
}

// Pending is what a power loss would drop now.
func (d *agentDisk) Pending() (lazyfs.Loss, error) {
	resp, err := d.call(hostagent.Request{Op: hostagent.OpPending})
	return resp.Loss, err
}

func (d *agentDisk) SetFaults(f lazyfs.Faults) error {
	_, err := d.call(hostagent.Request{Op: hostagent.OpDiskFaults, Faults: &f})
	return err
}

func (d *agentDisk) Corrupt(co lazyfs.Corruption) (lazyfs.Corrupted, error) {
	resp, err := d.call(hostagent.Request{Op: hostagent.OpCorrupt, Corruption: &co})
	if resp.Corrupted == nil {
		return lazyfs.Corrupted{}, err
	}
	return *resp.Corrupted, err
}

func (d *agentDisk) Unmount() error {
	_, err := d.call(hostagent.Request{Op: hostagent.OpUnmount})
	return err
}
