package history

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// Ops holds a history's paired operations compactly, so that a history of
// millions stays small and cheap for the garbage collector: one fixed-size
// record per operation with no pointers in it (never scanned), the token,
// value and high-water text in an append-only arena of large chunks, the
// key, error and node names interned, and the rarely set fields (tampering,
// what the record cannot hold) in a side table: OpRecordBytes (64) per
// operation plus its text.
//
// Add copies an operation in; once sorted (Sort, or the first reader),
// At(i) gives back the i-th by invoke index as the Pairer made it. The
// strings of an Op from At share the arena: no copy is made.
//
// An Ops is not safe for concurrent use until it is sorted; once sorted,
// its readers and Memo may be called from many goroutines.
type Ops struct {
	recs   [][]opRec // chunks of opsChunk records, by invoke index once sorted
	n      int
	sorted bool
	text   [][]byte // arena chunks; never reallocated, so strings made from them stay valid
	names  []string // interned names; 0 is ""
	nameIx map[string]uint32
	rare   []rareFields // 0 is unused
	memoMu sync.Mutex
	memo   map[any]*memoEntry
	recent [16]recentName // name's cache
	// prov is where the Ops ended before its first provisional record
	// (AddProvisional); active while there are any.
	prov struct {
		active      bool
		textChunks  int
		rare, count int
	}
}

// Memo returns what build returned the first time it was asked for key on
// these operations (a view of them that every checker needs, computed once:
// checkers.Group). Adding an operation forgets every memo. Checkers that
// run at once on sorted operations share one build: the others wait for it.
func (o *Ops) Memo(key any, build func() any) any {
	o.memoMu.Lock()
	m := o.memo[key]
	if m == nil {
		if o.memo == nil {
			o.memo = map[any]*memoEntry{}
		}
		m = &memoEntry{}
		o.memo[key] = m
	}
	o.memoMu.Unlock()
	m.once.Do(func() { m.v = build() })
	return m.v
}

// memoEntry is one Memo: built once, however many ask at once.
type memoEntry struct {
	once sync.Once
	v    any
}

const (
	opsChunkBits = 14
	opsChunk     = 1 << opsChunkBits
	textChunk    = 1 << 20
)

// opRec is one operation. Its token, value and high-water text are adjacent
// in the arena: text[chunk][off:off+tokLen] is Token.Raw, the valLen bytes
// after it Value, the hwLen bytes after those HighWater.
//
// Return is not stored when it is what the Pairer makes it (Never for info,
// else Completed); CompleteID is stored as its distance from ID, Process,
// Error and Node in 32 and 16 bits, F as a client operation's number (what
// does not fit is in the side table), and F, Outcome and the token's State
// share a byte (the two enums have three values each). The text's lengths
// take two bytes for the token and the value and one for the high-water
// mark, its chunk two: text that does not fit (a token or value of 64 KiB
// or more, a mark of 256 bytes, an arena past 64 Ki chunks) is in the side
// table, all of it. A valid token's seal is what follows its first dot, as
// ParseToken splits it (one that is not is in the side table). 64 bytes in
// all (72 before: in a 10-minute run the records were four fifths of the
// check's heap and of live coverage's).
type opRec struct {
	id             int64
	call, complete int64
	tokN           uint64
	off            uint32
	key            uint32
	rare           uint32 // index into Ops.rare, 0 for none
	process        int32
	doneAt         int32 // CompleteID - ID (noCompletion: -1)
	chunk, valLen  uint16
	tokLen         uint16
	err, node      uint16
	hwLen          uint8
	kind           uint8 // f (index into opNames, 0: in rare) | outcome<<3 | tokState<<5
}

func (r *opRec) f() uint8                           { return r.kind & 7 }
func (r *opRec) outcome() Outcome                   { return Outcome(r.kind >> 3 & 3) }
func (r *opRec) tokState() TokenState               { return TokenState(r.kind >> 5 & 3) }
func kindOf(f uint8, o Outcome, t TokenState) uint8 { return f | uint8(o&3)<<3 | uint8(t&3)<<5 }

// opNames are the client operations a record names by number.
var opNames = [...]string{"", Acquire, Renew, Release, Write, Read}

func opNumber(f string) uint8 {
	for i, n := range opNames[1:] {
		if n == f {
			return uint8(i + 1)
		}
	}
	return 0
}

// rareFields are the fields most operations leave empty.
type rareFields struct {
	tampered, sentByClient string
	// Only when the record cannot hold them (see opRec):
	f                 string
	process           int
	completeID        int64
	ownCompleteID     bool
	errName, nodeName string
	ret               int64
	ownRet            bool
	// Only when the text does not fit the record (see opRec: ownText), or
	// the seal is not the token's own:
	raw, value, highWater, seal string
	ownText                     bool
}

// OpRecordBytes is the fixed size of one operation in Ops (without its text).
const OpRecordBytes = int(unsafe.Sizeof(opRec{}))

// OpsOf copies ops into a sorted Ops (tests, tools).
func OpsOf(ops []*Op) *Ops {
	o := &Ops{}
	for _, op := range ops {
		o.Add(op)
	}
	o.Sort()
	return o
}

// Len is the number of operations.
func (o *Ops) Len() int { return o.n }

func (o *Ops) name(s string) uint32 {
	if o.nameIx == nil {
		o.nameIx = map[string]uint32{}
		o.names = []string{""}
	}
	if s == "" {
		return 0
	}
	// The reader interns keys (and the same error words recur): the same
	// string, by its bytes' address, is most often one seen just before.
	c := &o.recent[(uintptr(unsafe.Pointer(unsafe.StringData(s)))>>3)%uintptr(len(o.recent))]
	if unsafe.StringData(c.s) == unsafe.StringData(s) && len(c.s) == len(s) {
		return c.i
	}
	i, ok := o.nameIx[s]
	if !ok {
		i = uint32(len(o.names))
		o.names = append(o.names, s)
		o.nameIx[s] = i
	}
	*c = recentName{s, i}
	return i
}

type recentName struct {
	s string
	i uint32
}

// put appends a, b and c adjacent in the arena and returns where they
// start.
func (o *Ops) put(a, b, c string) (chunk, off uint32) {
	n := len(a) + len(b) + len(c)
	last := len(o.text) - 1
	if last < 0 || cap(o.text[last])-len(o.text[last]) < n {
		o.text = append(o.text, make([]byte, 0, max(textChunk, n)))
		last++
	}
	t := o.text[last]
	off = uint32(len(t))
	t = append(t, a...)
	t = append(t, b...)
	t = append(t, c...)
	o.text[last] = t
	return uint32(last), off
}

func (o *Ops) str(chunk, off, n uint32) string {
	if n == 0 {
		return ""
	}
	return unsafe.String(&o.text[chunk][off], n)
}

// Add copies one operation in.
func (o *Ops) Add(op *Op) {
	if o.prov.active {
		panic("history: Ops.Add between AddProvisional and DropProvisional")
	}
	o.add(op)
}

// provisional marks a record AddProvisional added (opRec.kind's free bit).
const provisional = 1 << 7

// AddProvisional copies in an operation that may still change (an info
// write a later strip event can still amend), to be counted with the
// others now and dropped again with DropProvisional: a live count of a
// growing history reads every operation without a copy of them all. No
// Add may come in between. Its text goes to chunks of its own, which
// DropProvisional lets go of without reusing them, so strings Load gave
// out stay valid.
func (o *Ops) AddProvisional(op *Op) {
	if !o.prov.active {
		o.prov.active, o.prov.textChunks, o.prov.rare = true, len(o.text), len(o.rare)
		o.text = append(o.text, make([]byte, 0, provTextChunk))
	}
	o.add(op)
	o.rec(uint32(o.n - 1)).kind |= provisional
	o.prov.count++
}

// provTextChunk is the first provisional text chunk's size.
const provTextChunk = 64 << 10

// DropProvisional removes every record AddProvisional added, keeping the
// others in their order (sorted stays sorted).
func (o *Ops) DropProvisional() {
	if !o.prov.active {
		return
	}
	j := 0
	for i := range o.n {
		r := o.rec(uint32(i))
		if r.kind&provisional != 0 {
			continue
		}
		if i != j {
			*o.rec(uint32(j)) = *r
		}
		j++
	}
	o.n = j
	chunks := (j + opsChunk - 1) >> opsChunkBits
	clear(o.recs[chunks:])
	o.recs = o.recs[:chunks]
	if j&(opsChunk-1) != 0 {
		o.recs[chunks-1] = o.recs[chunks-1][:j&(opsChunk-1)]
	}
	clear(o.text[o.prov.textChunks:])
	o.text = o.text[:o.prov.textChunks]
	clear(o.rare[o.prov.rare:])
	o.rare = o.rare[:o.prov.rare]
	o.prov.active, o.prov.count = false, 0
	o.memo = nil
}

func (o *Ops) add(op *Op) {
	rf := rareFields{tampered: op.Tampered, sentByClient: op.SentByClient}
	raw, val, hw := op.Token.Raw, op.Value, op.HighWater
	ownText := func() {
		rf.raw, rf.value, rf.highWater, rf.ownText = raw, val, hw, true
		raw, val, hw = "", "", ""
	}
	if len(raw) > math.MaxUint16 || len(val) > math.MaxUint16 || len(hw) > math.MaxUint8 {
		ownText()
	}
	chunk, off := o.put(raw, val, hw)
	if chunk > math.MaxUint16 {
		ownText() // its bytes in the arena are left unused
		chunk, off = 0, 0
	}
	r := opRec{id: op.ID, call: op.Call, complete: op.Completed,
		process: int32(op.Process), tokN: op.Token.N, chunk: uint16(chunk), off: off,
		tokLen: uint16(len(raw)), valLen: uint16(len(val)), hwLen: uint8(len(hw)),
		kind: kindOf(opNumber(op.F), op.Outcome, op.Token.State), key: o.name(op.Key)}
	if r.f() == 0 {
		rf.f = op.F
	}
	switch d := op.CompleteID - op.ID; {
	case op.CompleteID == -1:
		r.doneAt = noCompletion
	case d > math.MinInt32 && d <= math.MaxInt32:
		r.doneAt = int32(d)
	default:
		rf.completeID, rf.ownCompleteID = op.CompleteID, true
	}
	if e := o.name(op.Error); e < math.MaxUint16 {
		r.err = uint16(e)
	} else {
		rf.errName = op.Error
	}
	if n := o.name(op.Node); n < math.MaxUint16 {
		r.node = uint16(n)
	} else {
		rf.nodeName = op.Node
	}
	if int(r.process) != op.Process {
		rf.process, r.process = op.Process, 0
	}
	if op.Return != pairedReturn(op.Outcome, op.Completed) {
		rf.ret, rf.ownRet = op.Return, true
	}
	if op.Token.Seal != sealOf(op.Token.State, raw) {
		rf.seal = op.Token.Seal
	}
	if rf != (rareFields{}) {
		if len(o.rare) == 0 {
			o.rare = append(o.rare, rareFields{})
		}
		r.rare = uint32(len(o.rare))
		o.rare = append(o.rare, rf)
	}
	if o.n>>opsChunkBits == len(o.recs) {
		o.recs = append(o.recs, make([]opRec, 0, opsChunk))
	}
	o.recs[o.n>>opsChunkBits] = append(o.recs[o.n>>opsChunkBits], r)
	o.n++
	o.sorted = false
	o.memo = nil
}

// noCompletion is opRec.doneAt of an operation without a completion.
const noCompletion = math.MinInt32

// pairedReturn is the Return the Pairer gives an operation.
func pairedReturn(o Outcome, completed int64) int64 {
	if o == OutcomeInfo {
		return Never
	}
	return completed
}

// sealOf is the seal of a token as the record holds it: what follows the
// first dot of a valid one.
func sealOf(s TokenState, raw string) string {
	if s != TokenValid {
		return ""
	}
	if i := strings.IndexByte(raw, '.'); i >= 0 {
		return raw[i+1:]
	}
	return ""
}

func (o *Ops) rec(pos uint32) *opRec { return &o.recs[pos>>opsChunkBits][pos&(opsChunk-1)] }

// Sort orders the operations by invoke index (At's order).
func (o *Ops) Sort() {
	if o.sorted {
		return
	}
	from := o.placeBySlot()
	if from == nil {
		from = o.placeBySort()
	}
	// Move the records into place, cycle by cycle (position i gets the
	// record at from[i]): At then reads them in memory order, which is
	// what the hardware prefetches (through a permutation, even a nearly
	// sorted one, reading a million records took three times as long).
	done := make([]uint64, (o.n+63)/64)
	for i := range from {
		if done[i/64]&(1<<(i%64)) != 0 {
			continue
		}
		tmp := *o.rec(uint32(i))
		j := i
		for {
			done[j/64] |= 1 << (j % 64)
			k := int(from[j])
			if k == i {
				*o.rec(uint32(j)) = tmp
				break
			}
			*o.rec(uint32(j)) = *o.rec(uint32(k))
			j = k
		}
	}
	o.sorted = true
}

// placeBySlot is, for each position in invoke order, the Add position of
// the record that goes there, found through a table of the indexes (a
// recorder's are dense: about two per operation), or nil when the indexes
// are too sparse for one or repeat.
func (o *Ops) placeBySlot() []uint32 {
	if o.n == 0 {
		return []uint32{}
	}
	lo, hi := o.rec(0).id, o.rec(0).id
	for i := range o.n {
		id := o.rec(uint32(i)).id
		lo, hi = min(lo, id), max(hi, id)
	}
	if uint64(hi-lo) >= 4*uint64(o.n) {
		return nil
	}
	slot := make([]uint32, hi-lo+1) // Add position + 1; 0: none
	for i := range o.n {
		s := &slot[o.rec(uint32(i)).id-lo]
		if *s != 0 {
			return nil
		}
		*s = uint32(i) + 1
	}
	from := make([]uint32, 0, o.n)
	for _, s := range slot {
		if s != 0 {
			from = append(from, s-1)
		}
	}
	return from
}

// placeBySort is placeBySlot for any indexes.
func (o *Ops) placeBySort() []uint32 {
	type pos struct {
		id int64
		at uint32
	}
	ps := make([]pos, o.n)
	for i := range ps {
		ps[i] = pos{o.rec(uint32(i)).id, uint32(i)}
	}
	slices.SortFunc(ps, func(a, b pos) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.at, b.at)) })
	from := make([]uint32, o.n)
	for i, p := range ps {
		from[i] = p.at
	}
	return from
}

// At is the i-th operation by invoke index. Its strings share the arena.
func (o *Ops) At(i int) Op {
	var op Op
	o.Load(i, &op)
	return op
}

// Load is At into op (no copy of the result: the analysis's passes read
// millions).
func (o *Ops) Load(i int, op *Op) {
	o.Sort()
	r := o.rec(uint32(i))
	tl, vl, ch := uint32(r.tokLen), uint32(r.valLen), uint32(r.chunk)
	raw := o.str(ch, r.off, tl)
	*op = Op{ID: r.id, Process: int(r.process), F: opNames[r.f()], Key: o.names[r.key],
		Token: Token{N: r.tokN, State: r.tokState(), Raw: raw},
		Value: o.str(ch, r.off+tl, vl), Outcome: r.outcome(), Error: o.names[r.err],
		HighWater: o.str(ch, r.off+tl+vl, uint32(r.hwLen)),
		Call:      r.call, Return: pairedReturn(r.outcome(), r.complete), Completed: r.complete, CompleteID: r.id + int64(r.doneAt), Node: o.names[r.node]}
	if r.doneAt == noCompletion {
		op.CompleteID = -1
	}
	op.Token.Seal = sealOf(r.tokState(), raw)
	if r.rare != 0 {
		rf := &o.rare[r.rare]
		op.Tampered, op.SentByClient = rf.tampered, rf.sentByClient
		if r.f() == 0 {
			op.F = rf.f
		}
		if rf.process != 0 {
			op.Process = rf.process
		}
		if rf.ownRet {
			op.Return = rf.ret
		}
		if rf.ownCompleteID {
			op.CompleteID = rf.completeID
		}
		if rf.errName != "" {
			op.Error = rf.errName
		}
		if rf.nodeName != "" {
			op.Node = rf.nodeName
		}
		if rf.ownText {
			op.Token.Raw, op.Value, op.HighWater = rf.raw, rf.value, rf.highWater
		}
		if rf.seal != "" {
			op.Token.Seal = rf.seal
		}
	}
}

// Touch reads the records at positions at, so that loading them next
// finds them in the cache. A key's operations are spread over the whole
// history: loading them one by one waits for memory at each (two thirds
// of a direct check's copying, measured), while a run of bare reads lets
// the processor wait for them all at once. Touch a few dozen at a time,
// just before loading them. The result means nothing: it keeps the reads
// (and, as Touch is not inlined, the caller's call).
//
//go:noinline
func (o *Ops) Touch(at []int32) uint64 {
	o.Sort()
	var s uint64
	for _, j := range at {
		r := o.rec(uint32(j))
		s += uint64(r.id) + uint64(r.kind) // a record may span two cache lines
	}
	return s
}

// TouchBatch is how many positions to Touch at a time.
const TouchBatch = 32

// Brief is what the analysis's counting passes (and the report's layout)
// read of an operation.
type Brief struct {
	F, Key string
	// KeyID is the same for every operation on Key, and small: an index
	// into what Ops interned.
	KeyID           uint32
	Outcome         Outcome
	Call, Completed int64
	ID              int64
	Process         int
}

// Brief is the i-th operation's Brief: Load without the rest.
func (o *Ops) Brief(i int) Brief {
	o.Sort()
	r := o.rec(uint32(i))
	b := Brief{F: opNames[r.f()], Key: o.names[r.key], KeyID: r.key, Outcome: r.outcome(), Call: r.call, Completed: r.complete,
		ID: r.id, Process: int(r.process)}
	if r.rare != 0 {
		rf := &o.rare[r.rare]
		if r.f() == 0 {
			b.F = rf.f
		}
		if rf.process != 0 {
			b.Process = rf.process
		}
	}
	return b
}

// Call is the i-th operation's call time (Brief without the rest).
func (o *Ops) Call(i int) int64 {
	o.Sort()
	return o.rec(uint32(i)).call
}

// F is the i-th operation's f (At without the rest).
func (o *Ops) F(i int) string {
	o.Sort()
	if r := o.rec(uint32(i)); r.f() != 0 || r.rare == 0 {
		return opNames[r.f()]
	}
	return o.At(i).F
}

// Find is the index (for At) of the operation whose invoke has history
// index id, or -1.
func (o *Ops) Find(id int64) int {
	o.Sort()
	i := sort.Search(o.n, func(i int) bool { return o.rec(uint32(i)).id >= id })
	if i == o.n || o.rec(uint32(i)).id != id {
		return -1
	}
	return i
}

// Op returns a copy of the operation whose invoke has history index id, or
// nil.
func (o *Ops) Op(id int64) *Op {
	i := o.Find(id)
	if i < 0 {
		return nil
	}
	op := o.At(i)
	return &op
}

// All returns a copy of every operation, by invoke index (small histories,
// tests).
func (o *Ops) All() []*Op {
	out := make([]*Op, o.Len())
	slab := make([]Op, o.Len())
	for i := range slab {
		slab[i] = o.At(i)
		out[i] = &slab[i]
	}
	return out
}
