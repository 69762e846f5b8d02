package lazyfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirNode is a folder. Its current entries are its fs.Inode children; the
// durable ones are durable, mirroring its backing folder bpath ("" while the
// folder itself has no durable existence).
type dirNode struct {
	fs.Inode
	lfs     *lfs
	attrs   attrs
	bpath   string
	durable map[string]fs.InodeEmbedder
	// durParent and durName are where the backing folder sits in its
	// parent's durable entries (nil for the root and for orphans).
	durParent *dirNode
	durName   string
	loaded    bool
}

// fileNode is a regular file. data is its current content once loaded
// (read in from a durable location on first use); locs are the backing
// files that hold its durable content (its durable names, or one orphan);
// dirty says data differs from them.
type fileNode struct {
	fs.Inode
	lfs    *lfs
	attrs  attrs
	locs   []string
	data   []byte
	loaded bool
	dirty  bool
	// [lo, hi) holds every byte written since the last fsync, and whole
	// says the backing file holds none of the content (a new file): what
	// an fsync writes. Size changes are applied by truncating.
	lo, hi int64
	whole  bool
	// log is every change since the last fsync, for a crash state that
	// keeps some of them (crash.go); overflow says it grew past maxLog.
	log      []op
	logBytes int
	overflow bool
}

// touch notes that [lo, hi) changed.
func (f *fileNode) touch(lo, hi int64) {
	if !f.dirty {
		f.dirty, f.lo, f.hi = true, lo, hi
		return
	}
	f.lo, f.hi = min(f.lo, lo), max(f.hi, hi)
}

var (
	_ fs.NodeOnAdder   = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeSetattrer = (*dirNode)(nil)
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeMkdirer   = (*dirNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRmdirer   = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
	_ fs.NodeFsyncer   = (*dirNode)(nil)
	_ fs.NodeStatfser  = (*dirNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeReader    = (*fileNode)(nil)
	_ fs.NodeWriter    = (*fileNode)(nil)
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeFsyncer   = (*fileNode)(nil)
	_ fs.NodeFlusher   = (*fileNode)(nil)
	_ fs.NodeAllocater = (*fileNode)(nil)
	_ fs.NodeStatfser  = (*fileNode)(nil)
)

// OnAdd reads the backing folder into the tree when the root is mounted.
func (d *dirNode) OnAdd(ctx context.Context) {
	if d != d.lfs.root || d.loaded {
		return
	}
	d.loaded = true
	d.lfs.loadErr = d.lfs.load(ctx, d)
}

func (d *dirNode) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.lfs.mu.Lock()
	defer d.lfs.mu.Unlock()
	d.attrs.fill(&out.Attr, syscall.S_IFDIR)
	out.Nlink = 2
	out.Size = 4096
	return 0
}

func (d *dirNode) Setattr(_ context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	d.lfs.mu.Lock()
	defer d.lfs.mu.Unlock()
	d.attrs.set(in)
	d.attrs.fill(&out.Attr, syscall.S_IFDIR)
	return 0
}

func (d *dirNode) Statfs(_ context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(d.lfs.backing, out)
}

func statfs(dir string, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return errno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

// reserved keeps the orphan folder's name out of the root's view.
func (d *dirNode) reserved(name string) bool { return d == d.lfs.root && name == orphanDir }

func (d *dirNode) Create(ctx context.Context, name string, _ uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	d.lfs.mu.Lock()
	defer d.lfs.mu.Unlock()
	if d.reserved(name) {
		return nil, nil, 0, syscall.EPERM
	}
	if d.GetChild(name) != nil {
		return nil, nil, 0, syscall.EEXIST
	}
	if d.lfs.faults.Full {
		return nil, nil, 0, errNoSpace
	}
	f := &fileNode{lfs: d.lfs, loaded: true, dirty: true, whole: true, attrs: newAttrs(ctx, mode)}
	ch := d.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG})
	f.attrs.fill(&out.Attr, syscall.S_IFREG)
	return ch, nil, 0, 0
}

func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.lfs.mu.Lock()
	defer d.lfs.mu.Unlock()
	if d.reserved(name) {
		return nil, syscall.EPERM
	}
	if d.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	if d.lfs.faults.Full {
		return nil, errNoSpace
	}
	c := &dirNode{lfs: d.lfs, durable: map[string]fs.InodeEmbedder{}, attrs: newAttrs(ctx, mode)}
	ch := d.NewPersistentInode(ctx, c, fs.StableAttr{Mode: syscall.S_IFDIR})
	c.attrs.fill(&out.Attr, syscall.S_IFDIR)
	return ch, 0
}

func (d *dirNode) Unlink(_ context.Context, name string) syscall.Errno {
	d.lfs.mu.Lock()
	defer d.lfs.mu.Unlock()
	c := d.GetChild(name)
	switch {
	case c == nil:
		return syscall.ENOENT
	case c.IsDir():
		return syscall.EISDIR
	}
	// Keep the content reachable for open descriptors: the durable copy
	// may go away when the folder is synced.
	if f, ok := c.Operations().(*fileNode); ok {
		if err := f.load(); err != nil {
			return errno(err)
		}
	}
	return 0
}

func (d *dirNode) Rmdir(_ context.Context, name string) syscall.Errno {
	d.lfs.mu.Lock()
	defer d.lfs.mu.Unlock()
	c := d.GetChild(name)
	switch {
	case c == nil:
		return syscall.ENOENT
	case !c.IsDir():
		return syscall.ENOTDIR
	case len(c.Children()) > 0:
		return syscall.ENOTEMPTY
	}
	return 0
}

func (d *dirNode) Rename(_ context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	d.lfs.mu.Lock()
	defer d.lfs.mu.Unlock()
	np, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	if np.reserved(newName) {
		return syscall.EPERM
	}
	if flags&fs.RENAME_EXCHANGE != 0 {
		return syscall.ENOTSUP
	}
	src := d.GetChild(name)
	if src == nil {
		return syscall.ENOENT
	}
	dst := np.GetChild(newName)
	if dst != nil {
		if flags&renameNoReplace != 0 {
			return syscall.EEXIST
		}
		switch {
		case src.IsDir() && !dst.IsDir():
			return syscall.ENOTDIR
		case !src.IsDir() && dst.IsDir():
			return syscall.EISDIR
		case dst.IsDir() && len(dst.Children()) > 0:
			return syscall.ENOTEMPTY
		}
		if f, ok := dst.Operations().(*fileNode); ok {
			if err := f.load(); err != nil {
				return errno(err)
			}
		}
	}
	if src.IsDir() {
		// A folder cannot move into itself.
		for p := np.EmbeddedInode(); p != nil; _, p = p.Parent() {
			if p == src {
				return syscall.EINVAL
			}
		}
	}
	return 0
}

// Fsync of a folder makes its current entries durable.
func (d *dirNode) Fsync(_ context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	d.lfs.fsyncDelay(d.EmbeddedInode())
	if e, cut := d.lfs.meetCut(); cut {
		return e
	}
	d.lfs.mu.Lock()
	defer d.lfs.mu.Unlock()
	if d.lfs.down {
		return syscall.EIO
	}
	if !d.lfs.strict {
		return errno(d.lfs.commitLocked())
	}
	return errno(d.syncLocked())
}

func (d *dirNode) syncLocked() error {
	l := d.lfs
	if d.bpath == "" {
		d.bpath = l.orphanPath()
		if err := os.Mkdir(d.bpath, 0o755); err != nil {
			return err
		}
	}
	cur := d.Children()
	for name, old := range d.durable {
		if c := cur[name]; c == nil || c.Operations() != old {
			if err := d.removeDurable(name, old); err != nil {
				return err
			}
		}
	}
	for name, c := range cur {
		if d.durable[name] == c.Operations() {
			continue
		}
		if err := d.place(name, c.Operations()); err != nil {
			return err
		}
	}
	return syncBacking(d.bpath)
}

// removeDurable takes name out of the backing folder. A node still in the
// current view keeps its durable content as an orphan: it may get a durable
// name again.
func (d *dirNode) removeDurable(name string, old fs.InodeEmbedder) error {
	l := d.lfs
	p := filepath.Join(d.bpath, name)
	delete(d.durable, name)
	switch old := old.(type) {
	case *fileNode:
		if err := old.load(); err != nil {
			return err
		}
		old.locs = without(old.locs, p)
		if len(old.locs) == 0 && alive(old.EmbeddedInode()) {
			q := l.orphanPath()
			old.locs = []string{q}
			return os.Rename(p, q)
		}
		return os.Remove(p)
	case *dirNode:
		if old.bpath == p && alive(old.EmbeddedInode()) {
			q := l.orphanPath()
			if err := os.Rename(p, q); err != nil {
				return err
			}
			old.moved(q)
			old.durParent, old.durName = nil, ""
			return nil
		}
		return os.RemoveAll(p)
	}
	return nil
}

// place gives node c the durable name d/name.
func (d *dirNode) place(name string, c fs.InodeEmbedder) error {
	l := d.lfs
	p := filepath.Join(d.bpath, name)
	switch c := c.(type) {
	case *fileNode:
		switch {
		case len(c.locs) == 0:
			// The entry is durable, the data is not: an empty file.
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			f.Close()
			c.locs = []string{p}
			c.whole = true // the backing file holds none of it
		case l.isOrphan(c.locs[0]):
			if err := os.Rename(c.locs[0], p); err != nil {
				return err
			}
			c.locs[0] = p
		default:
			// Durable under another name still (a rename whose source
			// folder is not synced yet): both names hold it.
			if err := os.Link(c.locs[0], p); err != nil {
				return err
			}
			c.locs = append(c.locs, p)
		}
	case *dirNode:
		if c.bpath == "" {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			c.bpath = p
		} else {
			if c.durParent != nil {
				delete(c.durParent.durable, c.durName)
			}
			if err := os.Rename(c.bpath, p); err != nil {
				return err
			}
			c.moved(p)
		}
		c.durParent, c.durName = d, name
	}
	d.durable[name] = c
	return nil
}

// moved notes that d's backing folder is now at p, and so is everything
// durable under it.
func (d *dirNode) moved(p string) {
	old := d.bpath
	d.bpath = p
	for name, c := range d.durable {
		switch c := c.(type) {
		case *fileNode:
			for i, loc := range c.locs {
				if loc == filepath.Join(old, name) {
					c.locs[i] = filepath.Join(p, name)
				}
			}
		case *dirNode:
			c.moved(filepath.Join(p, name))
		}
	}
}

func without(locs []string, p string) []string {
	out := locs[:0]
	for _, l := range locs {
		if l != p {
			out = append(out, l)
		}
	}
	return out
}

// load reads the durable content in, once.
func (f *fileNode) load() error {
	if f.loaded {
		return nil
	}
	if len(f.locs) > 0 {
		b, err := os.ReadFile(f.locs[0])
		if err != nil {
			return err
		}
		f.data = b
	}
	f.loaded = true
	return nil
}

func (f *fileNode) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

func (f *fileNode) Read(_ context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	if err := f.load(); err != nil {
		return nil, errno(err)
	}
	if off >= int64(len(f.data)) {
		return fuse.ReadResultData(nil), 0
	}
	n := copy(dest, f.data[off:])
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *fileNode) Write(_ context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	if f.lfs.down {
		return 0, syscall.EIO
	}
	if err := f.load(); err != nil {
		return 0, errno(err)
	}
	if f.noSpace(off + int64(len(data))) {
		return 0, errNoSpace
	}
	old := int64(len(f.data))
	f.grow(off + int64(len(data)))
	if off > old {
		clear(f.data[old:off]) // a hole reads as zeros
	}
	copy(f.data[off:], data)
	f.touch(off, off+int64(len(data)))
	f.logWrite(off, data)
	f.attrs.mtime = time.Now()
	return uint32(len(data)), 0
}

func (f *fileNode) grow(size int64) {
	if size <= int64(len(f.data)) {
		return
	}
	if size <= int64(cap(f.data)) {
		f.data = f.data[:size]
		return
	}
	n := make([]byte, size, size+size/4)
	copy(n, f.data)
	f.data = n
}

func (f *fileNode) size() uint64 {
	if f.loaded || len(f.locs) == 0 {
		return uint64(len(f.data))
	}
	st, err := os.Stat(f.locs[0])
	if err != nil {
		return 0
	}
	return uint64(st.Size())
}

func (f *fileNode) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	f.attrs.fill(&out.Attr, syscall.S_IFREG)
	out.Size = f.size()
	out.Blocks = (out.Size + 511) / 512
	out.Nlink = 1
	return 0
}

func (f *fileNode) Setattr(_ context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	if sz, ok := in.GetSize(); ok {
		if err := f.load(); err != nil {
			return errno(err)
		}
		if f.noSpace(int64(sz)) {
			return errNoSpace
		}
		if int64(sz) < int64(len(f.data)) {
			f.data = f.data[:sz]
		} else {
			old := len(f.data)
			f.grow(int64(sz))
			clear(f.data[old:])
		}
		f.touch(int64(sz), int64(sz))
		f.logSize(int64(sz))
	}
	f.attrs.set(in)
	f.attrs.fill(&out.Attr, syscall.S_IFREG)
	out.Size = f.size()
	return 0
}

func (f *fileNode) Allocate(_ context.Context, _ fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	if mode&^uint32(1) != 0 { // only plain allocation and FALLOC_FL_KEEP_SIZE
		return syscall.EOPNOTSUPP
	}
	if mode&1 != 0 {
		return 0
	}
	if err := f.load(); err != nil {
		return errno(err)
	}
	if end := int64(off + size); end > int64(len(f.data)) {
		if f.noSpace(end) {
			return errNoSpace
		}
		old := len(f.data)
		f.grow(end)
		clear(f.data[old:])
		f.touch(end, end)
		f.logSize(end)
	}
	return 0
}

func (f *fileNode) Flush(context.Context, fs.FileHandle) syscall.Errno { return 0 }

func (f *fileNode) Statfs(_ context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(f.lfs.backing, out)
}

// Fsync makes the file's data durable: written to its backing file (an
// orphan while it has no durable name) and synced there.
func (f *fileNode) Fsync(_ context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	f.lfs.fsyncDelay(f.EmbeddedInode())
	if e, cut := f.lfs.meetCut(); cut {
		return e
	}
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	if f.lfs.down {
		return syscall.EIO
	}
	if err := f.syncLocked(); err != nil {
		return errno(err)
	}
	if !f.lfs.strict {
		return errno(f.lfs.commitLocked())
	}
	return 0
}

func (f *fileNode) syncLocked() error {
	if !f.dirty {
		return nil
	}
	if len(f.locs) == 0 {
		f.locs = []string{f.lfs.orphanPath()}
		f.whole = true
	}
	w, err := os.OpenFile(f.locs[0], os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	// Only what changed is written (an fsync'd log appends a little each
	// time), then the size is set, which zero-fills or cuts.
	lo, hi := f.lo, min(f.hi, int64(len(f.data)))
	if f.whole {
		lo, hi = 0, int64(len(f.data))
	}
	if err := w.Truncate(int64(len(f.data))); err != nil {
		w.Close()
		return err
	}
	if hi > lo {
		if _, err := w.WriteAt(f.data[lo:hi], lo); err != nil {
			w.Close()
			return err
		}
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	f.dirty, f.whole = false, false
	f.synced()
	return nil
}

// renameNoReplace is renameat2's RENAME_NOREPLACE.
const renameNoReplace = 0x1
