package history

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ops gives back every operation as it was added, by invoke index, rare
// and oversized fields included.
func TestOpsRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 70_000)
	ops := []*Op{
		{ID: 7, Process: 2, F: Write, Key: "r1", Token: ParseToken("12.ab-c"), Value: "v1", Outcome: OutcomeFail,
			Error: "stale", HighWater: "13", Call: 5, Return: 9, Completed: 9, CompleteID: 8, Node: "n1"},
		{ID: 1, Process: -5, F: Acquire, Key: "l1", Token: ParseToken("3"), Call: 1, Return: Never, Completed: Never, CompleteID: -1, Outcome: OutcomeInfo},
		{ID: 3, Process: 4, F: Write, Key: "r1", Token: ParseToken("4"), Tampered: "garble", SentByClient: "9", Value: "",
			Outcome: OutcomeOk, Call: 2, Return: 4, Completed: 4, CompleteID: 4},
		{ID: 5, Process: 1, F: Write, Key: "r2", Token: ParseToken(long), HighWater: long, Value: long, Outcome: OutcomeFail, Error: "malformed"},
		{ID: 2, Process: 1, F: Read, Key: "r2", Token: Token{N: 1, State: TokenValid, Raw: "1", Seal: "odd"}},
		// Past the record's text lengths (two bytes for the token and the
		// value, one for the mark): the text goes to the side table.
		{ID: 8, Process: 1, F: Write, Key: "r2", Token: ParseToken("12." + strings.Repeat("s", 256)), Value: "v", HighWater: "12." + strings.Repeat("s", 256), Outcome: OutcomeOk},
		{ID: 9, Process: 1, F: Write, Key: "r2", Token: ParseToken("13.ab"), Value: long, Outcome: OutcomeOk},
		{ID: 10, Process: 1, F: Write, Key: "r2", Token: ParseToken("14"), Value: "w", HighWater: strings.Repeat("9", 300), Outcome: OutcomeFail},
		{ID: 11, Process: 1, F: Write, Key: "r2", Token: ParseToken("15." + strings.Repeat("t", 256)), Value: strings.Repeat("u", 65535),
			HighWater: strings.Repeat("8", 255), Outcome: OutcomeOk},
	}
	o := OpsOf(ops)
	require.Equal(t, len(ops), o.Len())
	assert.Equal(t, 64, OpRecordBytes)
	assert.Equal(t, TokenValid, ops[5].Token.State)
	assert.NotEmpty(t, ops[5].Token.Seal)
	want := []*Op{ops[1], ops[4], ops[2], ops[3], ops[0], ops[5], ops[6], ops[7], ops[8]}
	assert.Equal(t, want, o.All())
	assert.Equal(t, ops[0], o.Op(7))
	assert.Nil(t, o.Op(6))
	assert.Equal(t, Write, o.F(4))
	assert.Equal(t, 3, o.Find(5))
}

// What the record leaves out when it is the usual (see opRec) comes back
// from the side table when it is not.
func TestOpsUnusualFields(t *testing.T) {
	ops := []*Op{
		{ID: 1, Process: 1 << 40, F: "other", Key: "k", Call: 1, Return: 3, Completed: 5, Outcome: OutcomeOk},
		{ID: 2, Process: 3, F: Read, Key: "k", Call: 1, Return: 7, Completed: 9, Outcome: OutcomeInfo},
	}
	assert.Equal(t, ops, OpsOf(ops).All())
	assert.Equal(t, "other", OpsOf(ops).F(0))
}

// Brief is Load's answer, fewer fields.
func TestOpsBriefAgrees(t *testing.T) {
	ops := []*Op{
		{ID: 1, Process: 1 << 40, F: "other", Key: "k", Call: 1, Return: 3, Completed: 5, Outcome: OutcomeOk},
		{ID: 2, Process: 3, F: Read, Key: "j", Call: 1, Return: 7, Completed: 9, Outcome: OutcomeInfo},
	}
	o := OpsOf(ops)
	for i, op := range ops {
		assert.Equal(t, Brief{F: op.F, Key: op.Key, KeyID: o.Brief(i).KeyID, Outcome: op.Outcome, Call: op.Call,
			Completed: op.Completed, ID: op.ID, Process: op.Process}, o.Brief(i))
	}
}

// Far completions and many names leave the record too.
func TestOpsFarAndMany(t *testing.T) {
	var ops []*Op
	for i := range 70_000 {
		ops = append(ops, &Op{ID: int64(i), F: Write, Key: "k", Error: fmt.Sprint("e", i), Node: fmt.Sprint("n", i),
			CompleteID: int64(i) + 1<<40, Outcome: OutcomeFail, Completed: 3, Return: 3})
	}
	ops = append(ops, &Op{ID: 1 << 41, F: Read, CompleteID: -1, Completed: Never, Return: Never, Outcome: OutcomeInfo})
	assert.Equal(t, ops, OpsOf(ops).All())
}

// Provisional operations are counted with the others until dropped; the
// others then read as before, in their order, and later ones add as
// usual, over as many record chunks as it takes.
func TestOpsProvisional(t *testing.T) {
	long := strings.Repeat("y", 70_000)
	var ops, late []*Op
	for i := range opsChunk + 100 {
		ops = append(ops, &Op{ID: int64(2 * i), F: Write, Key: "k", Value: fmt.Sprint("v", i), Call: int64(i), Completed: int64(i) + 1, Return: int64(i) + 1, Outcome: OutcomeOk})
	}
	for i := range 300 {
		late = append(late, &Op{ID: int64(2*i + 1), F: Write, Key: "k", Value: fmt.Sprint("late", i), Tampered: "t",
			Token: ParseToken(long), Call: int64(i), Completed: Never, Return: Never, CompleteID: -1, Outcome: OutcomeInfo})
	}
	o := &Ops{}
	for _, op := range ops {
		o.Add(op)
	}
	o.Sort()
	for round := range 3 {
		for _, op := range late {
			o.AddProvisional(op)
		}
		assert.Panics(t, func() { o.Add(ops[0]) })
		assert.Equal(t, OpsOf(append(append([]*Op{}, ops...), late...)).All(), o.All(), "round %d", round)
		o.DropProvisional()
		assert.Equal(t, OpsOf(ops).All(), o.All(), "round %d", round)
		more := &Op{ID: int64(2*len(ops) + round), F: Read, Key: "k", Value: "m", Call: 9, Completed: 10, Return: 10, Outcome: OutcomeOk}
		ops = append(ops, more)
		o.Add(more)
		assert.Equal(t, OpsOf(ops).All(), o.All(), "round %d", round)
	}
	o.DropProvisional() // none: nothing changes
	assert.Equal(t, OpsOf(ops).All(), o.All())
}

// BenchmarkOpsAt reads every operation of a 100k-operation history once,
// as each pass of the analysis does.
func BenchmarkOpsAt(b *testing.B) {
	o := &Ops{}
	for i := range 100_000 {
		// Completion order, as the Pairer yields them: a little out of
		// invoke order.
		id := int64(i ^ 7)
		o.Add(&Op{ID: id, F: Write, Key: "k", Token: ParseToken("12"), Value: "v", Call: id, Completed: id + 1, Return: id + 1})
	}
	o.Sort()
	b.ResetTimer()
	var n int64
	for b.Loop() {
		for i := range o.Len() {
			op := o.At(i)
			n += op.Call
		}
	}
	_ = n
}

// Indexes far apart, or repeated (a hand-made list), sort as well.
func TestOpsSortAnyIndexes(t *testing.T) {
	ops := []*Op{{ID: 1 << 62, F: Read}, {ID: -(1 << 62), F: Read}, {ID: 5, F: Write}, {ID: 5, F: Read}}
	assert.Equal(t, []*Op{ops[1], ops[2], ops[3], ops[0]}, OpsOf(ops).All())
	ops = []*Op{{ID: 3, F: Read}, {ID: 3, F: Write}, {ID: 1, F: Read}}
	assert.Equal(t, []*Op{ops[2], ops[0], ops[1]}, OpsOf(ops).All())
}

// A recycled operation is reused for the next invoke, fully reset; an info
// write is never recycled (a late strip event may still change it).
func TestPairerRecycle(t *testing.T) {
	p := NewPairer()
	add := func(e Event) *Op {
		op, err := p.Add(e)
		require.NoError(t, err)
		return op
	}
	add(Event{Index: 0, Process: 1, Type: Invoke, F: Write, Key: "k", Token: "1", Value: "a"})
	first := add(Event{Index: 1, Time: 5, Process: 1, Type: Fail, F: Write, Key: "k", Token: "1", Value: "a", Error: "stale"})
	require.NotNil(t, first)
	p.Recycle(first)
	add(Event{Index: 2, Time: 6, Process: 1, Type: Invoke, F: Read, Key: "k"})
	second := add(Event{Index: 3, Time: 7, Process: 1, Type: Ok, F: Read, Key: "k"})
	assert.Same(t, first, second)
	assert.Equal(t, &Op{ID: 2, Process: 1, F: Read, Key: "k", Call: 6, Return: 7, Completed: 7, CompleteID: 3}, second)

	add(Event{Index: 4, Time: 8, Process: 1, Type: Invoke, F: Write, Key: "k", Token: "2", Value: "b"})
	info := add(Event{Index: 5, Time: 9, Process: 1, Type: Info, F: Write, Key: "k"})
	p.Recycle(info)
	assert.Empty(t, p.free)
}
