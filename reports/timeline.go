package reports

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/history"
)

// opsView is how the page lays out the analysis's operations: by call time,
// each on a row of the timeline. It holds what the layout and the plots
// read of each operation (laidOp), not the operations: the timeline loads
// the few it draws in full (opsView.full). A copy of every operation (about
// 250 bytes each) had made the report cost more memory than the check.
type opsView struct {
	end  int64
	ops  []laidOp // by call, then invoke index
	lane []int32  // the row of ops[i]
	// lanes lists each row's processes, in order.
	lanes [][]int
	keys  []string // sorted; laidOp.key indexes it
	fs    []string // laidOp.f indexes it
	all   *history.Ops
	op    history.Op // full's, reused
}

// laidOp is what the layout and the plots read of one operation, in 48
// bytes (72 with the key and function as strings): its key and function
// as indexes into opsView.keys and .fs; pos is its index in the
// analysis's Ops.
type laidOp struct {
	ID, Call, Completed int64
	Process             int
	pos                 int32
	key, f              uint32
	Outcome             history.Outcome
}

func newOpsView(res *analysis.Result) *opsView {
	v := &opsView{end: res.End, all: res.Ops}
	if res.Ops != nil {
		v.ops = make([]laidOp, res.Ops.Len())
		keyIx, fIx := map[string]uint32{}, map[string]uint32{}
		var lastKey, lastF string
		var lastKeyIx uint32
		var lastFIx uint32
		var o history.Op
		for i := range v.ops {
			res.Ops.Load(i, &o)
			if i == 0 || o.Key != lastKey {
				k, ok := keyIx[o.Key]
				if !ok {
					k = uint32(len(v.keys))
					keyIx[o.Key] = k
					v.keys = append(v.keys, o.Key)
				}
				lastKey, lastKeyIx = o.Key, k
			}
			if i == 0 || o.F != lastF {
				f, ok := fIx[o.F]
				if !ok {
					f = uint32(len(v.fs))
					fIx[o.F] = f
					v.fs = append(v.fs, o.F)
				}
				lastF, lastFIx = o.F, f
			}
			v.ops[i] = laidOp{ID: o.ID, Call: o.Call, Completed: o.Completed, Process: o.Process, key: lastKeyIx, f: lastFIx,
				Outcome: o.Outcome, pos: int32(i)}
		}
		// The keys sorted, and the operations' indexes with them.
		order := make([]uint32, len(v.keys))
		for i := range order {
			order[i] = uint32(i)
		}
		slices.SortFunc(order, func(x, y uint32) int { return cmp.Compare(v.keys[x], v.keys[y]) })
		sorted, at := make([]string, len(v.keys)), make([]uint32, len(v.keys))
		for i, k := range order {
			sorted[i], at[k] = v.keys[k], uint32(i)
		}
		v.keys = sorted
		for i := range v.ops {
			v.ops[i].key = at[v.ops[i].key]
		}
	}
	slices.SortFunc(v.ops, func(x, y laidOp) int {
		if x.Call != y.Call {
			return cmp.Compare(x.Call, y.Call)
		}
		return cmp.Compare(x.ID, y.ID)
	})
	v.assignLanes()
	return v
}

// fOf is the operation's function.
func (v *opsView) fOf(o *laidOp) string { return v.fs[o.f] }

// full is the whole of ops[i]: valid until the next call.
func (v *opsView) full(i int) *history.Op {
	v.all.Load(int(v.ops[i].pos), &v.op)
	return &v.op
}

// done reports whether the operation's completion is in the history.
func done(o *laidOp) bool { return o.Completed != history.Never }

// barEnd is where the operation's bar ends: its completion (also for info),
// or the end of the history when it never completed.
func (v *opsView) barEnd(o *laidOp) int64 {
	if done(o) {
		return o.Completed
	}
	return v.end
}

// assignLanes gives every process a row of the timeline. A client that saw
// info continues under a new process number, so drawing one row per process
// would give thousands of rows; instead a process reuses the first row whose
// previous process has finished, which keeps the rows close to the number of
// concurrent clients.
func (v *opsView) assignLanes() {
	type span struct {
		proc       int
		first, end int64
	}
	spans := map[int]*span{}
	var order []*span
	for i := range v.ops {
		o := &v.ops[i]
		s := spans[o.Process]
		if s == nil {
			s = &span{proc: o.Process, first: o.Call, end: v.barEnd(o)}
			spans[o.Process] = s
			order = append(order, s)
		}
		s.end = max(s.end, v.barEnd(o))
	}
	// order is by first call already (ops are sorted by call).
	free := &laneHeap{}
	laneOf := map[int]int{}
	for _, s := range order {
		lane := -1
		if free.Len() > 0 && (*free)[0].end < s.first {
			lane = heap.Pop(free).(laneEnd).lane
		} else {
			lane = len(v.lanes)
			v.lanes = append(v.lanes, nil)
		}
		v.lanes[lane] = append(v.lanes[lane], s.proc)
		laneOf[s.proc] = lane
		heap.Push(free, laneEnd{lane: lane, end: s.end})
	}
	v.lane = make([]int32, len(v.ops))
	for i := range v.ops {
		v.lane[i] = int32(laneOf[v.ops[i].Process])
	}
}

type laneEnd struct {
	lane int
	end  int64
}

// laneHeap orders rows by when they become free, then by row number so the
// layout is deterministic.
type laneHeap []laneEnd

func (h laneHeap) Len() int { return len(h) }
func (h laneHeap) Less(i, j int) bool {
	if h[i].end != h[j].end {
		return h[i].end < h[j].end
	}
	return h[i].lane < h[j].lane
}
func (h laneHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *laneHeap) Push(x any)   { *h = append(*h, x.(laneEnd)) }
func (h *laneHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
