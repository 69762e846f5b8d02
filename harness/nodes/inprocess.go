package nodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// servers is the driver of in-process nodes: servers inside this process
// (the reference), each on a loopback port it keeps across restarts, its
// log in <run>/logs/<node>.log. A kill drops the server at once; its data
// folder is what survives, as after kill -9.
type servers struct {
	unreachable
	c    *Cluster
	logs []*os.File
}

func (d *servers) prepare(_ context.Context, m *member) error { return loopbackPorts(m) }

func (d *servers) view(m *member) (string, string) { return m.workDir(), "" }

// make gives every in-process node its server, in table order, once every
// node's folders are ready.
func (d *servers) make(ms []*member) error {
	logDir := filepath.Join(d.c.Env().Dir, "logs")
	ws := map[string]Workspace{}
	for _, m := range ms {
		if m.Kind() != KindInProcess {
			continue
		}
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return err
		}
		lf, err := os.Create(filepath.Join(logDir, m.Name+".log"))
		if err != nil {
			return err
		}
		d.logs = append(d.logs, lf)
		addr, _ := loopbackAddr(m, "")
		ws[m.Name] = Workspace{Name: m.Name, Data: m.workDir(), Addr: addr, Log: lf,
			Of: func(node string) (Workspace, bool) { w, ok := ws[node]; return w, ok }}
	}
	for _, m := range ms {
		if m.Kind() != KindInProcess {
			continue
		}
		r, err := m.Server.New(ws[m.Name])
		if err != nil {
			return fmt.Errorf("node %s: %w", m.Name, err)
		}
		m.run = r
	}
	return nil
}

// start starts the server on its address (a running one is left as it is).
func (d *servers) start(_ context.Context, m *member) error {
	if m.run.Running() {
		return nil
	}
	addr, err := loopbackAddr(m, "")
	if err != nil {
		return err
	}
	_, err = m.run.Start(addr)
	return err
}

func (d *servers) running(_ context.Context, m *member) (bool, error) {
	return m.run != nil && m.run.Running(), nil
}

// pause stalls every request until resume, as SIGSTOP would (wall time,
// and so leases, go on).
func (d *servers) pause(_ context.Context, m *member) error  { m.run.Pause(); return nil }
func (d *servers) resume(_ context.Context, m *member) error { m.run.Resume(); return nil }

// kill drops the server at once: what it had not made durable is gone.
func (d *servers) kill(_ context.Context, m *member) error { return m.run.Kill() }

func (d *servers) hostAddr(m *member, port string) (string, error) { return loopbackAddr(m, port) }

// moveClock sets the server's injectable clock.
func (d *servers) moveClock(_ context.Context, m *member, offset time.Duration) error {
	cr, ok := m.run.(ClockRunner)
	if !ok {
		return fmt.Errorf("node %s has no settable clock", m.Name)
	}
	return cr.SetClockOffset(offset)
}

func (d *servers) clockReach(context.Context, *member) string { return "" }

func (d *servers) cutWhy(m *member) string {
	return fmt.Sprintf("node %s runs in this process: it has no links of its own to cut (the proxies cut clients from it)", m.Name)
}

func (d *servers) layerWhy(*member) string { return "" }

func (d *servers) newLayer(m *member) (disk, error) { return d.c.layers.mount(m) }

// stopAll stops every server gracefully and closes the logs.
func (d *servers) stopAll(ms []*member) error {
	var errs []error
	for _, m := range ms {
		if m.run != nil {
			errs = append(errs, m.run.Stop())
		}
	}
	for _, f := range d.logs {
		errs = append(errs, f.Close())
	}
	d.logs = nil
	return errors.Join(errs...)
}
