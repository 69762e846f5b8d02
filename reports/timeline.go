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
	end int64
	ops []laidOp // by call, then invoke index
	// lanes lists each row's processes, in order.
	lanes [][]int
	keys  []string // sorted
	keyAt []int    // the index in keys of an Ops key id (Brief.KeyID)
	all   *history.Ops
	op    history.Op // full's, reused
}

// laidOp is what the layout keeps of one operation, in 8 bytes: its index
// in the analysis's Ops (pos; the rest, its call included, is read from
// there: brief, call) and its row. Earlier layouts, a copy of every
// operation (about 250 bytes each), the fields the page reads (72 bytes)
// and then the call beside pos and row (16 bytes), had made the report
// cost more memory than the check, and then been its peak.
type laidOp struct {
	pos  int32
	lane int32
}

// opBrief is what the layout and the plots read of one operation.
type opBrief struct {
	ID, Call, Completed int64
	Process             int
	F                   string
	key                 int // index into opsView.keys
	Outcome             history.Outcome
}

func newOpsView(res *analysis.Result) *opsView {
	v := &opsView{end: res.End, all: res.Ops}
	if res.Ops != nil {
		v.ops = make([]laidOp, res.Ops.Len())
		var names []string // by key id
		for i := range v.ops {
			b := res.Ops.Brief(i)
			v.ops[i] = laidOp{pos: int32(i)}
			for int(b.KeyID) >= len(names) {
				names = append(names, "")
				v.keyAt = append(v.keyAt, -1)
			}
			if v.keyAt[b.KeyID] < 0 {
				v.keyAt[b.KeyID] = 0
				names[b.KeyID] = b.Key
				v.keys = append(v.keys, b.Key)
			}
		}
		slices.Sort(v.keys)
		for id, k := range names {
			if v.keyAt[id] >= 0 {
				v.keyAt[id], _ = slices.BinarySearch(v.keys, k)
			}
		}
	}
	// By call, then invoke index: Ops is in invoke order, so pos orders
	// as the index does (and the calls are nearly in order already).
	if v.all != nil {
		slices.SortFunc(v.ops, func(x, y laidOp) int {
			if c := cmp.Compare(v.all.Call(int(x.pos)), v.all.Call(int(y.pos))); c != 0 {
				return c
			}
			return cmp.Compare(x.pos, y.pos)
		})
	}
	v.assignLanes()
	return v
}

// brief is what the layout reads of ops[i].
func (v *opsView) brief(i int) opBrief {
	b := v.all.Brief(int(v.ops[i].pos))
	return opBrief{ID: b.ID, Call: b.Call, Completed: b.Completed, Process: b.Process, F: b.F, key: v.keyAt[b.KeyID], Outcome: b.Outcome}
}

// call is ops[i]'s call time.
func (v *opsView) call(i int) int64 { return v.all.Call(int(v.ops[i].pos)) }

// full is the whole of ops[i]: valid until the next call.
func (v *opsView) full(i int) *history.Op {
	v.all.Load(int(v.ops[i].pos), &v.op)
	return &v.op
}

// done reports whether the operation's completion is in the history.
func done(o *opBrief) bool { return o.Completed != history.Never }

// barEnd is where the operation's bar ends: its completion (also for info),
// or the end of the history when it never completed.
func (v *opsView) barEnd(o *opBrief) int64 {
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
		o := v.brief(i)
		s := spans[o.Process]
		if s == nil {
			s = &span{proc: o.Process, first: o.Call, end: v.barEnd(&o)}
			spans[o.Process] = s
			order = append(order, s)
		}
		s.end = max(s.end, v.barEnd(&o))
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
	for i := range v.ops {
		v.ops[i].lane = int32(laneOf[v.brief(i).Process])
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
