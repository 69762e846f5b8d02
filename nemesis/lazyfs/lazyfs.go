// Package lazyfs is a FUSE filesystem over a backing directory that behaves
// like a disk behind a page cache, as Jepsen's lazyfs does: what a program
// writes is kept in memory and reaches the backing directory only when the
// program makes it durable. A file's data (its content and size) becomes
// durable on fsync (or fdatasync) of that file; a directory's entries
// (create, unlink, rename, mkdir, rmdir) become durable on fsync of that
// directory. PowerLoss drops everything not durable: the mount is taken
// down and made again from the backing directory, which holds exactly what a
// disk would still hold after the power went out.
//
// A kill -9 of the program that writes keeps the layer's memory, as it keeps
// the kernel's page cache: only PowerLoss loses what was never synced, so a
// system that writes its state without fsync (or renames a file without
// syncing the directory) survives a restart and fails a power loss.
//
// Folder entries follow one of two models (Options.Strict). By default,
// as on a journalling filesystem (ext4, XFS), an fsync of any file or
// folder commits the journal: every pending entry change becomes durable
// with it, while a file's data still becomes durable only by an fsync of
// that file. Strictly (POSIX), an entry becomes durable only by an fsync of
// its own folder. Either way a rename, create or unlink followed by no fsync
// at all is gone after a power loss. The strict model is too strict for the
// systems this is run against (Redis makes its AOF folder and never syncs
// its parent: on ext4 the journal makes that folder durable within
// moments, at the first fsync at the latest).
//
// A new file whose entry is not yet durable but whose data was fsynced keeps
// its data in a hidden folder of the backing directory (orphanDir) until its
// entry is made durable; a durable entry whose data never was is an empty
// file after a power loss, as on a journalling filesystem in ordered mode.
// Hard links and symbolic links are not supported (ENOTSUP): the stores this
// layer is for do not make them.
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// orphanDir holds, in the backing directory, the durable data of files and
// folders that have no durable name yet. It is emptied at every mount and
// never shown through the layer.
const orphanDir = ".lazyfs-orphans"

// Loss counts what one power loss dropped.
type Loss struct {
	// Files whose data differed from their durable data (written, truncated
	// or created since their last fsync).
	Files int `json:"files"`
	// Entries are directory entries that differed from their durable
	// entries (created, removed or renamed since their folder's last fsync).
	Entries int `json:"entries"`
	// Kept is, under a crash state other than lose-all, how many pages of
	// unsynced writes (and size changes) were on disk all the same.
	Kept int `json:"kept,omitempty"`
	// AtFsync: the loss was an armed cut (ArmCut) that met an fsync, so
	// the power went the instant that fsync was asked for.
	AtFsync bool `json:"at_fsync,omitempty"`
}

// Total is every file and entry dropped.
func (l Loss) Total() int { return l.Files + l.Entries }

// Options configure New.
type Options struct {
	// Strict makes folder entries durable only by an fsync of their own
	// folder (POSIX), not by any fsync (a journal commit).
	Strict bool
	_      struct{}
}

// Mount is a lazyfs mounted at a folder over a backing folder.
type Mount struct {
	backing, dir string
	opts         Options

	mu     sync.Mutex // serialises PowerLoss and Unmount
	lfs    *lfs
	server *fuse.Server
	faults Faults // the disk's (faults.go), kept across power losses
}

// Supported says whether this machine can mount the layer (the /dev/fuse
// device opens for reading and writing), and why not.
func Supported() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("no FUSE: %v", err)
	}
	f.Close()
	return nil
}

// New mounts a lazyfs at dir over backing, creating both folders when
// missing. What backing holds is what the mount starts with; dir must be
// empty and not be inside backing.
func New(backing, dir string, opts Options) (*Mount, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if dir == backing || strings.HasPrefix(dir, backing+string(filepath.Separator)) {
		return nil, fmt.Errorf("lazyfs: the mount point %s is inside the backing folder %s", dir, backing)
	}
	for _, d := range []string{backing, dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	m := &Mount{backing: backing, dir: dir, opts: opts}
	if err := m.mount(); err != nil {
		return nil, err
	}
	return m, nil
}

// Dir is the mount point: the folder programs use.
func (m *Mount) Dir() string { return m.dir }

// Backing is the folder that holds what is durable.
func (m *Mount) Backing() string { return m.backing }

func (m *Mount) mount() error {
	orphans := filepath.Join(m.backing, orphanDir)
	if err := os.RemoveAll(orphans); err != nil {
		return err
	}
	if err := os.Mkdir(orphans, 0o700); err != nil {
		return err
	}
	l := &lfs{backing: m.backing, orphans: orphans, strict: m.opts.Strict, faults: m.faults}
	root := &dirNode{lfs: l, bpath: m.backing, durable: map[string]fs.InodeEmbedder{}, attrs: attrsOf(m.backing, 0o755)}
	l.root = root
	sec := time.Second
	opts := &fs.Options{
		EntryTimeout: &sec, AttrTimeout: &sec,
		MountOptions: fuse.MountOptions{
			// The source names the serving process, so that a sweep
			// knows a mount whose server died (sweep.go).
			FsName: serverSource(), Name: "fencecheck",
			// Containers run their programs as other users; the mount is
			// bind-mounted into them.
			AllowOther:  os.Geteuid() == 0,
			DirectMount: os.Geteuid() == 0,
			MaxWrite:    1 << 20,
		},
	}
	srv, err := fs.Mount(m.dir, root, opts)
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", m.dir, err)
	}
	if l.loadErr != nil {
		srv.Unmount()
		return fmt.Errorf("lazyfs: reading %s: %w", m.backing, l.loadErr)
	}
	m.lfs, m.server = l, srv
	return nil
}

// errNotMounted: a fault asked of a layer that is down.
var errNotMounted = errors.New("lazyfs: not mounted")

// Pending counts what a power loss would drop now.
func (m *Mount) Pending() Loss {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lfs.pending()
}

// PowerLoss drops everything not durable: the mount is taken down (the
// programs using it must be dead, or hold no file open in it) and made
// again from the backing folder. It returns what was dropped.
func (m *Mount) PowerLoss() (Loss, error) { return m.PowerLossAs(CrashState{}) }

// PowerLossAs is PowerLoss that leaves what cs chooses of the unsynced
// writes of files with a durable name (crash.go): written back in part, or
// torn at page granularity. Folder entries not made durable are dropped
// whatever the mode.
func (m *Mount) PowerLossAs(cs CrashState) (Loss, error) {
	if err := cs.Check(); err != nil {
		return Loss{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.server == nil {
		return Loss{}, errNotMounted
	}
	l := m.lfs
	l.mu.Lock()
	l.down = true // nothing more reaches the backing folder from this mount
	loss := l.pendingLocked()
	loss.AtFsync = l.releaseCutLocked()
	kept, err := applyLocked(l.chooseLocked(cs))
	loss.Kept = kept
	l.mu.Unlock()
	if err != nil {
		return loss, fmt.Errorf("lazyfs: crash state %s: %w", cs.Mode, err)
	}
	if err := m.unmountLocked(); err != nil {
		return loss, err
	}
	return loss, m.mount()
}

// Unmount takes the mount down; what is not durable is lost, as at a power
// loss. Safe to call twice.
func (m *Mount) Unmount() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.server == nil {
		return nil
	}
	m.lfs.mu.Lock()
	m.lfs.down = true
	m.lfs.releaseCutLocked()
	m.lfs.mu.Unlock()
	return m.unmountLocked()
}

// Abort ends the mount at once, whatever uses it: its FUSE connection is
// aborted (every request waiting on it fails, one from this very process
// included, and so does every later access) and the mount is detached. It
// is for a server whose controller is gone: it never waits for the mount's
// users, as Unmount may, and what is not durable is lost. Safe to call
// twice, and after Unmount.
func (m *Mount) Abort() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.server == nil {
		return nil
	}
	m.lfs.mu.Lock()
	m.lfs.down = true
	m.lfs.releaseCutLocked()
	m.lfs.mu.Unlock()
	mounts, err := layerMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, lm := range mounts {
		if lm.point != m.dir || lm.source != serverSource() {
			continue
		}
		if err := abortConnection(lm.dev); err != nil {
			errs = append(errs, err)
			syscall.Unmount(m.dir, syscall.MNT_FORCE)
		}
	}
	if err := syscall.Unmount(m.dir, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		errs = append(errs, fmt.Errorf("lazyfs: detach %s: %w", m.dir, err))
	}
	m.server = nil
	return errors.Join(errs...)
}

// unmountLocked unmounts, lazily (detached) when a process still holds the
// mount busy after the library's retries: a power loss cannot wait for the
// system under test's good will.
func (m *Mount) unmountLocked() error {
	// The library waits, after the unmount, until the kernel closes the
	// connection, which is when the last copy of the mount goes (a dying
	// container's mount namespace holds one): past a while the mount point
	// is free all the same, and the old connection ends with its last user.
	done := make(chan error, 1)
	srv := m.server
	go func() { done <- srv.Unmount() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(unmountWait):
	}
	if err != nil {
		if err2 := syscall.Unmount(m.dir, syscall.MNT_DETACH); err2 != nil {
			if out, err3 := run("fusermount3", "-u", "-z", m.dir); err3 != nil {
				return fmt.Errorf("lazyfs: unmount %s: %v; detach: %v; fusermount3: %v %s", m.dir, err, err2, err3, out)
			}
		}
	}
	m.server = nil
	return nil
}

// unmountWait bounds the wait for the kernel to close a connection after
// an unmount.
const unmountWait = 10 * time.Second

// lfs is one mount's state: the tree of nodes is the current view (what
// programs see); each node remembers what of it is durable.
type lfs struct {
	backing, orphans string
	root             *dirNode
	loadErr          error
	strict           bool

	mu      sync.Mutex // the whole tree: simple and obviously right
	down    bool
	orphanN int
	// seq numbers unsynced changes in the order they were made; logged
	// are the files that have some (crash.go).
	seq    uint64
	logged map[*fileNode]struct{}
	faults Faults
	cut    *fsyncCut // an armed power cut (cut.go)
}

func (l *lfs) orphanPath() string {
	l.orphanN++
	return filepath.Join(l.orphans, fmt.Sprintf("o%d", l.orphanN))
}

func (l *lfs) isOrphan(p string) bool {
	return strings.HasPrefix(p, l.orphans+string(filepath.Separator))
}

// attrs are the metadata the layer keeps per node (durable or not: a power
// loss keeps the backing folder's, which is close enough for the stores it
// serves).
type attrs struct {
	mode     uint32
	uid, gid uint32
	mtime    time.Time
}

func attrsOf(path string, def uint32) attrs {
	st, err := os.Stat(path)
	if err != nil {
		return attrs{mode: def, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), mtime: time.Now()}
	}
	a := attrs{mode: uint32(st.Mode().Perm()), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		a.uid, a.gid = sys.Uid, sys.Gid
	}
	return a
}

// newAttrs are a new node's: its creator owns it (a server that checks
// who owns its data folder, as PostgreSQL does, finds itself).
func newAttrs(ctx context.Context, mode uint32) attrs {
	a := attrs{mode: mode & 0o7777, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), mtime: time.Now()}
	if c, ok := fuse.FromContext(ctx); ok && c != nil {
		a.uid, a.gid = c.Uid, c.Gid
	}
	return a
}

func (a *attrs) fill(out *fuse.Attr, kind uint32) {
	out.Mode = kind | a.mode
	out.SetTimes(&a.mtime, &a.mtime, &a.mtime)
	out.Owner = fuse.Owner{Uid: a.uid, Gid: a.gid}
	out.Blksize = 4096
}

func (a *attrs) set(in *fuse.SetAttrIn) {
	if m, ok := in.GetMode(); ok {
		a.mode = m & 0o7777
	}
	if u, ok := in.GetUID(); ok {
		a.uid = u
	}
	if g, ok := in.GetGID(); ok {
		a.gid = g
	}
	if t, ok := in.GetMTime(); ok {
		a.mtime = t
	} else {
		a.mtime = time.Now()
	}
}

// pendingLocked counts files and entries that differ from what is durable.
func (l *lfs) pendingLocked() Loss {
	var loss Loss
	var walk func(d *dirNode)
	walk = func(d *dirNode) {
		cur := d.Children()
		for name, c := range cur {
			if d.durable[name] != c.Operations() {
				loss.Entries++
			}
			switch c := c.Operations().(type) {
			case *fileNode:
				if c.dirty {
					loss.Files++
				}
			case *dirNode:
				walk(c)
			}
		}
		for name, old := range d.durable {
			if c := cur[name]; c == nil || c.Operations() != old {
				if c != nil {
					continue // counted above: a replaced entry is one change
				}
				loss.Entries++
			}
		}
	}
	walk(l.root)
	return loss
}

func (l *lfs) pending() Loss {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pendingLocked()
}

// load builds the tree under d from its backing folder; every node is
// persistent (the tree is the whole current view, not the kernel's cache).
func (l *lfs) load(ctx context.Context, d *dirNode) error {
	entries, err := os.ReadDir(d.bpath)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if d == l.root && e.Name() == orphanDir {
			continue
		}
		p := filepath.Join(d.bpath, e.Name())
		switch {
		case e.IsDir():
			c := &dirNode{lfs: l, bpath: p, durable: map[string]fs.InodeEmbedder{}, attrs: attrsOf(p, 0o755), durParent: d, durName: e.Name()}
			d.AddChild(e.Name(), d.NewPersistentInode(ctx, c, fs.StableAttr{Mode: syscall.S_IFDIR}), false)
			d.durable[e.Name()] = c
			if err := l.load(ctx, c); err != nil {
				return err
			}
		case e.Type().IsRegular():
			c := &fileNode{lfs: l, locs: []string{p}, attrs: attrsOf(p, 0o644)}
			d.AddChild(e.Name(), d.NewPersistentInode(ctx, c, fs.StableAttr{Mode: syscall.S_IFREG}), false)
			d.durable[e.Name()] = c
		default:
			return fmt.Errorf("%s: only regular files and folders are supported", p)
		}
	}
	return nil
}

// commitLocked is a journal commit: every folder's entries become durable,
// parents first (a new folder must have its name before what is in it).
func (l *lfs) commitLocked() error {
	var walk func(d *dirNode) error
	walk = func(d *dirNode) error {
		if err := d.syncLocked(); err != nil {
			return err
		}
		for _, c := range d.Children() {
			if cd, ok := c.Operations().(*dirNode); ok {
				if err := walk(cd); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(l.root)
}

// alive says whether n is still in the current view.
func alive(n *fs.Inode) bool {
	_, p := n.Parent()
	return p != nil
}

// syncBacking fsyncs a backing folder.
func syncBacking(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
