package lazyfs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
)

// Crash modes: what a power loss leaves of the writes not yet fsynced. Every
// mode keeps what was durable and drops every folder entry not made
// durable; they differ in what of the unsynced data of a file that has a
// durable name the disk had already got when the power went.
const (
	// LoseAll: none of it (a disk that wrote nothing back).
	LoseAll = "lose-all"
	// WritebackOrdered: the oldest writes, in the order they were made
	// across every file, up to a seeded point: a flusher that writes pages
	// back oldest first and kept the order.
	WritebackOrdered = "writeback-ordered"
	// WritebackAny: each page of each write (and each size change) on its
	// own, half of them, seeded: writeback that kept no order, so a later
	// page may be on disk while an earlier one is not.
	WritebackAny = "writeback-any"
	// TornOp: the last write that spans two pages or more is torn: a seeded
	// part of its pages is on disk, the rest and every other unsynced
	// write are not (LazyFS's torn-op).
	TornOp = "torn-op"
	// TornSeq: of the last writes (up to tornSeqLen) to the file written
	// last, a seeded subset is on disk, each whole; every other unsynced
	// write is not (LazyFS's torn-seq).
	TornSeq = "torn-seq"
)

// CrashModes lists the modes, LoseAll first.
func CrashModes() []string { return []string{LoseAll, WritebackOrdered, WritebackAny, TornOp, TornSeq} }

// CrashState chooses what a power loss leaves: its mode, and the seed of
// the mode's choices. The same state over the same unsynced writes leaves
// the same disk: a run records it, and a replay of the run's plan gives it
// back. The zero value is LoseAll.
type CrashState struct {
	Mode string `json:"mode,omitempty"`
	Seed uint64 `json:"seed,omitempty"`
}

// Check says whether the mode is one of CrashModes.
func (c CrashState) Check() error {
	if c.Mode == "" || slices.Contains(CrashModes(), c.Mode) {
		return nil
	}
	return fmt.Errorf("lazyfs: crash mode %q is not one of %v", c.Mode, CrashModes())
}

// PageSize is the unit a write is torn or written back in.
const PageSize = 4096

// maxLog and maxLogBytes bound the unsynced writes a file remembers (their
// data is kept):
// a file written more often than that between two fsyncs is whole or
// nothing (lose-all) at a power loss.
const (
	maxLog      = 256
	maxLogBytes = 4 << 20
	tornSeqLen  = 4
)

// op is one unsynced change of a file: a write of data at off, or a size
// change (data nil, size set).
type op struct {
	seq   uint64
	off   int64
	data  []byte
	size  int64
	trunc bool
}

// piece is the part of a write within one page (or a whole size change):
// the unit a crash state keeps or drops.
type piece struct {
	f   *fileNode
	op  *op
	lo  int64 // in the file
	hi  int64
	idx int // the op's index in f.log
}

// logWrite notes an unsynced write (f.lfs.mu held).
func (f *fileNode) logWrite(off int64, data []byte) {
	f.logOp(op{off: off, data: slices.Clone(data)})
}

// logSize notes an unsynced size change (f.lfs.mu held).
func (f *fileNode) logSize(size int64) { f.logOp(op{size: size, trunc: true}) }

func (f *fileNode) logOp(o op) {
	if f.overflow {
		return
	}
	if len(f.log) >= maxLog || f.logBytes+len(o.data) > maxLogBytes {
		f.log, f.logBytes, f.overflow = nil, 0, true
		return
	}
	f.logBytes += len(o.data)
	f.lfs.seq++
	o.seq = f.lfs.seq
	f.log = append(f.log, o)
	if f.lfs.logged == nil {
		f.lfs.logged = map[*fileNode]struct{}{}
	}
	f.lfs.logged[f] = struct{}{}
}

// synced forgets the log: the file's data is durable.
func (f *fileNode) synced() {
	f.log, f.logBytes, f.overflow = nil, 0, false
	delete(f.lfs.logged, f)
}

// pieces are every unit a crash state may keep, in the order they were
// made: the writes of files that have a durable content (a name on disk;
// a file without one is gone whatever its data), each cut at page bounds.
func (l *lfs) piecesLocked() []piece {
	var out []piece
	for f := range l.logged {
		if f.overflow || len(f.locs) == 0 || l.isOrphan(f.locs[0]) {
			continue
		}
		for i := range f.log {
			o := &f.log[i]
			if o.trunc {
				out = append(out, piece{f: f, op: o, idx: i})
				continue
			}
			end := o.off + int64(len(o.data))
			for lo := o.off; lo < end; {
				hi := min((lo/PageSize+1)*PageSize, end)
				out = append(out, piece{f: f, op: o, lo: lo, hi: hi, idx: i})
				lo = hi
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].op.seq != out[j].op.seq {
			return out[i].op.seq < out[j].op.seq
		}
		return out[i].lo < out[j].lo
	})
	return out
}

// chooseLocked is the pieces the crash state keeps, in the order they were
// made.
func (l *lfs) chooseLocked(cs CrashState) []piece {
	all := l.piecesLocked()
	if len(all) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(cs.Seed, 0x1a2f5))
	switch cs.Mode {
	case WritebackOrdered:
		return all[:rng.IntN(len(all)+1)]
	case WritebackAny:
		var out []piece
		for _, p := range all {
			if rng.IntN(2) == 0 {
				out = append(out, p)
			}
		}
		return out
	case TornOp:
		// The last write of two pages or more, else the last write.
		last := -1
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].op.trunc {
				continue
			}
			if last < 0 {
				last = i
			}
			if i > 0 && all[i-1].op == all[i].op {
				last = i
				break
			}
		}
		if last < 0 {
			return nil
		}
		o := all[last].op
		var parts []piece
		for _, p := range all {
			if p.op == o {
				parts = append(parts, p)
			}
		}
		if len(parts) == 1 {
			// A write within one page cannot tear at page granularity:
			// it is on disk or not.
			if rng.IntN(2) == 0 {
				return parts
			}
			return nil
		}
		// A part, never all nor none: 1..n-1 of its pages, seeded.
		keep := rng.Perm(len(parts))[:1+rng.IntN(len(parts)-1)]
		sort.Ints(keep)
		var out []piece
		for _, i := range keep {
			out = append(out, parts[i])
		}
		return out
	case TornSeq:
		f := all[len(all)-1].f
		var ops []*op
		for i := len(f.log) - 1; i >= 0 && len(ops) < tornSeqLen; i-- {
			ops = append(ops, &f.log[i])
		}
		var kept []*op
		for _, o := range ops {
			if rng.IntN(2) == 0 {
				kept = append(kept, o)
			}
		}
		var out []piece
		for _, p := range all {
			if p.f == f && slices.Contains(kept, p.op) {
				out = append(out, p)
			}
		}
		return out
	}
	return nil
}

// applyLocked puts the chosen pieces on disk, in the order they were made,
// over each file's durable content: what the disk had got when the power
// went. It returns how many pieces it kept.
func applyLocked(kept []piece) (int, error) {
	byFile := map[*fileNode][]piece{}
	var order []*fileNode
	for _, p := range kept {
		if _, ok := byFile[p.f]; !ok {
			order = append(order, p.f)
		}
		byFile[p.f] = append(byFile[p.f], p)
	}
	for _, f := range order {
		w, err := os.OpenFile(f.locs[0], os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		for _, p := range byFile[f] {
			if p.op.trunc {
				err = w.Truncate(p.op.size)
			} else {
				_, err = w.WriteAt(p.op.data[p.lo-p.op.off:p.hi-p.op.off], p.lo)
			}
			if err != nil {
				w.Close()
				return 0, err
			}
		}
		if err := w.Sync(); err != nil {
			w.Close()
			return 0, err
		}
		if err := w.Close(); err != nil {
			return 0, err
		}
	}
	return len(kept), nil
}
