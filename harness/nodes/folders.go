package nodes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/hostagent"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// Paths inside a container of every node that has them.
const (
	// ClockDirInContainer is where the node's clock folder is mounted: the
	// offset file inside is replaced by rename, which is why the folder is
	// mounted and not the file.
	ClockDirInContainer  = "/fencecheck/clock"
	ClockFileInContainer = ClockDirInContainer + "/offset"
)

// prepare gives every node its folders, ports and addresses, mounts the
// layers, fills the placeholders and makes the in-process servers.
func (c *Cluster) prepare(ctx context.Context) error {
	if err := c.ctr.images(ctx, c.members); err != nil {
		return err
	}
	for _, m := range c.members {
		if m.Kind() == KindURL {
			continue
		}
		if err := c.folders(m); err != nil {
			return fmt.Errorf("node %s: %w", m.Name, err)
		}
		if err := m.drv.prepare(ctx, m); err != nil {
			return fmt.Errorf("node %s: %w", m.Name, err)
		}
	}
	peers := addrVars(c.members, netAddr)
	peers["run"] = c.Env().RunID
	for _, m := range c.members {
		if err := c.dataFiles(m, peers); err != nil {
			return fmt.Errorf("node %s: %w", m.Name, err)
		}
	}
	if c.Env().DiskLayer {
		if err := c.mountLayers(); err != nil {
			return err
		}
	}
	for _, m := range c.members {
		data, clockFile := m.drv.view(m)
		m.vars = merge(peers, ownVars(m, data, clockFile))
	}
	return c.srv.make(c.members)
}

// root is where a node's folder goes.
func (c *Cluster) root(m *member) (string, error) {
	if m.Kind() == KindContainer && !c.opts.KeepData {
		// The engine's run directory: removed with the containers, and by
		// the watchdog if the harness dies (a database's files are large
		// and owned by other accounts).
		return c.ctr.rt.RunDir()
	}
	return filepath.Join(c.Env().Dir, "nodes"), nil
}

// hasData says whether the node has a data folder on this machine.
func (m *member) hasData() bool {
	return m.Kind() != KindURL && (m.Kind() != KindContainer || m.Data.Path != "")
}

func (m *member) dataDir() string  { return filepath.Join(m.dir, "data") }
func (m *member) clockDir() string { return filepath.Join(m.dir, "clock") }

// clockFile is the offset file of a ClockFile or ClockSkewLibrary node on
// this machine.
func (m *member) clockFile() string { return filepath.Join(m.clockDir(), "offset") }

// workDir is the folder the node works in: the layer over its data folder
// when there is one, else the data folder itself.
func (m *member) workDir() string {
	if m.disk != nil {
		return m.disk.Dir()
	}
	return m.dataDir()
}

// usesClockFile says whether the node's clock is an offset file.
func (m *member) usesClockFile() bool {
	return m.Clock.Via == ClockFile || m.Clock.Via == ClockSkewLibrary
}

// folders makes the node's folder, its data folder with its files, and its
// clock offset file at 0.
func (c *Cluster) folders(m *member) error {
	if m.Kind() == KindSSH {
		return nil // made on its host (the driver's prepare)
	}
	root, err := c.root(m)
	if err != nil {
		return err
	}
	m.dir = filepath.Join(root, m.Name)
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return err
	}
	if m.hasData() {
		if err := os.MkdirAll(m.dataDir(), 0o755); err != nil {
			return err
		}
		if err := c.ctr.own(m, m.dataDir()); err != nil {
			return err
		}
	}
	if m.usesClockFile() {
		if err := os.MkdirAll(m.clockDir(), 0o755); err != nil {
			return err
		}
		if err := fencing.WriteClockOffset(m.clockFile(), 0); err != nil {
			return err
		}
	}
	return nil
}

// dataFiles writes the node's data files into its new data folder, their
// placeholders of the nodes' addresses, {name} and {run} filled: a file
// that names the other nodes (ZooKeeper's zoo.cfg, which the server
// rewrites as its membership changes, so it lives with the data). An ssh
// node's files are written by its host agent, as given.
func (c *Cluster) dataFiles(m *member, peers map[string]string) error {
	if m.Kind() == KindSSH || !m.hasData() {
		return nil
	}
	vars := merge(peers, map[string]string{"name": m.Name})
	m.files = map[string]string{}
	for name, content := range m.Data.Files {
		m.files[name] = Substitute(content, vars)
	}
	return hostagent.WriteFiles(m.dataDir(), m.files)
}

// mountLayers puts each stateful node's data folder on the lazyfs layer
// where it can be, for the power-loss nemesis, and notes why not elsewhere.
func (c *Cluster) mountLayers() error {
	fuseErr := lazyfs.Supported()
	for _, m := range c.members {
		switch {
		case m.Kind() == KindURL:
		case m.Stateless:
			m.diskWhy = "it holds no state of its own"
		case !m.hasData():
			m.diskWhy = "the node declares no data path"
		case m.Data.NoLayer != "":
			m.diskWhy = m.Data.NoLayer
		case fuseErr != nil && m.Kind() != KindSSH: // an ssh node's FUSE is its host's
			m.diskWhy = fuseErr.Error()
		case m.drv.layerWhy(m) != "":
			m.diskWhy = m.drv.layerWhy(m)
		default:
			d, err := m.drv.newLayer(m)
			if err != nil {
				return fmt.Errorf("node %s: %w", m.Name, err)
			}
			m.disk = d
		}
	}
	return nil
}

// wipe empties the node's data folder, durably, and writes its files
// again: it starts as on its first start.
func wipe(m *member) error { return hostagent.Wipe(m.workDir(), m.files) }

// WipeData empties a stopped node's data folder (a hook's replacement of a
// member: etcd's).
func (c *Cluster) WipeData(node string) error {
	m, err := c.startedNode(node)
	if err != nil {
		return err
	}
	if !m.hasData() {
		return fmt.Errorf("node %s has no data folder", node)
	}
	return m.drv.wipe(context.Background(), m)
}
