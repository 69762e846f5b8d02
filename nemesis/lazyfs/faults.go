package lazyfs

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
)

// Faults are the disk's faults while set (SetFaults): a slow disk and a
// full one. The zero value is a healthy disk.
type Faults struct {
	// FsyncDelay makes every fsync (of a file or a folder) take this much
	// longer: a slow or saturated disk. The delay is served outside the
	// layer's lock, so reads and writes go on meanwhile.
	FsyncDelay time.Duration `json:"fsync_delay_ns,omitempty"`
	// FsyncDelayOnly keeps the delay to the fsyncs of these paths
	// (relative to the mount, slash-separated; a folder covers what is
	// under it): a slow log device beside a fast one. Empty: every fsync.
	FsyncDelayOnly []string `json:"fsync_delay_only,omitempty"`
	// Full: the disk has no space left. A write that needs new space (past
	// a file's end), a file's growth (truncate up, allocate) and a new
	// file or folder fail with ENOSPC; a write within a file's size and
	// everything that frees space (unlink, truncate down) succeed.
	Full bool `json:"full,omitempty"`
}

// SetFaults sets the disk's faults (Faults{} heals them). A power loss
// keeps them: they are the disk's, not the mount's.
func (m *Mount) SetFaults(f Faults) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = f
	if m.lfs != nil {
		m.lfs.mu.Lock()
		m.lfs.faults = f
		m.lfs.mu.Unlock()
	}
}

// fsyncDelay serves a slow disk's delay before an fsync of n (no lock
// held).
func (l *lfs) fsyncDelay(n *fusefs.Inode) {
	l.mu.Lock()
	f := l.faults
	l.mu.Unlock()
	if f.FsyncDelay > 0 && f.slows(n) {
		time.Sleep(f.FsyncDelay)
	}
}

// slows says whether the delay is for an fsync of n.
func (f Faults) slows(n *fusefs.Inode) bool {
	if len(f.FsyncDelayOnly) == 0 {
		return true
	}
	path := n.Path(nil)
	for _, p := range f.FsyncDelayOnly {
		p = strings.Trim(p, "/")
		if p == "" || path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// noSpace says whether growing to size end needs space a full disk lacks
// (l.mu held).
func (f *fileNode) noSpace(end int64) bool {
	return f.lfs.faults.Full && end > int64(len(f.data))
}

// Corruption modes (Corrupt), as Jepsen's file nemesis has them.
const (
	// BitFlip flips one bit of a durable file, at a seeded offset.
	BitFlip = "bitflip"
	// Truncate cuts a durable file at a seeded offset.
	Truncate = "truncate"
)

// Corruption is one corruption of the disk: its mode and the seed that
// picks the file (among the durable regular files, by path) and the
// offset.
type Corruption struct {
	Mode string `json:"mode"`
	Seed uint64 `json:"seed"`
}

// Corrupted says what Corrupt did: the file (relative to the mount) and
// where.
type Corrupted struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
}

// Corrupt damages the disk: one durable file of the backing folder. What
// the programs see changes only where the layer reads from the disk again
// (a file not read since the mount, every file after a power loss): the
// page cache hides a corruption, as the kernel's does, until it is
// evicted. A disk with no durable non-empty file has nothing to corrupt.
func (m *Mount) Corrupt(c Corruption) (Corrupted, error) {
	if c.Mode != BitFlip && c.Mode != Truncate {
		return Corrupted{}, fmt.Errorf("lazyfs: corruption %q is not %s or %s", c.Mode, BitFlip, Truncate)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lfs != nil {
		m.lfs.mu.Lock()
		defer m.lfs.mu.Unlock()
	}
	var files []string
	filepath.WalkDir(m.backing, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == orphanDir {
			return filepath.SkipDir
		}
		if info, err := d.Info(); err == nil && d.Type().IsRegular() && info.Size() > 0 {
			files = append(files, p)
		}
		return nil
	})
	if len(files) == 0 {
		return Corrupted{}, fmt.Errorf("lazyfs: no durable file in %s to corrupt", m.backing)
	}
	sort.Strings(files)
	rng := rand.New(rand.NewPCG(c.Seed, 0xc0de))
	p := files[rng.IntN(len(files))]
	st, err := os.Stat(p)
	if err != nil {
		return Corrupted{}, err
	}
	off := rng.Int64N(st.Size())
	rel := strings.TrimPrefix(p, m.backing+string(filepath.Separator))
	out := Corrupted{File: rel, Offset: off, Size: st.Size()}
	switch c.Mode {
	case BitFlip:
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return out, err
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			return out, err
		}
		b[0] ^= 1 << rng.IntN(8)
		if _, err := f.WriteAt(b, off); err != nil {
			return out, err
		}
		return out, f.Sync()
	default:
		return out, os.Truncate(p, off)
	}
}

var errNoSpace = syscall.ENOSPC
