// Package overlap finds lease overlaps in a history: periods in which two
// clients each held a lease on the same lock that they believed was still
// valid. An overlap is not a violation -- leases alone cannot prevent it when
// a lock service's clock jumps or a holder stalls -- it is the danger that
// fencing exists for, and the report shows how often fencing had to step in.
//
// A client's belief is reckoned the way a careful client reckons it, on its
// own monotonic clock: the lease is valid from the moment the ok acquire
// returns until ttl after the acquire was sent (the request may have waited
// in flight, so the sending time is the safe start; ttl is the lease the
// answer said was granted, extra.granted_ttl_ms, else the one asked for),
// extended by ok renews
// the same way, and over as soon as the client sends a release, sees a
// renew fail, or is retired by an info outcome (it no longer acts as that
// process). A client whose own wall clock was off records on its writes how
// much lease it believed was left (extra.lease_left_ms); its belief then runs
// to there, past the ttl when its clock was stepped back. So does a client
// paused between its lease check and its write (extra.stalled_ms): it wakes
// believing in what it checked, as a GC-paused process does.
package overlap

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/history"
)

// Reasons a lease ended.
const (
	EndExpired      = "expired"       // its ttl ran out on the client's clock
	EndReleased     = "released"      // the client sent a release
	EndRenewFailed  = "renew-failed"  // a renew came back lost
	EndRetired      = "retired"       // the process saw an info outcome
	EndReacquired   = "reacquired"    // the process asked for a lock again
	EndHistoryEnded = "history-ended" // the run stopped first
)

// Lease is one period in which one process believed it held a lock.
type Lease struct {
	Key     string `json:"key"`
	Process int    `json:"process"`
	Token   string `json:"token"`
	// AcquireID is the history index of the acquire's invoke.
	AcquireID int64 `json:"acquire_id"`
	// Start and End are history times (ns).
	Start     int64  `json:"start_ns"`
	End       int64  `json:"end_ns"`
	EndReason string `json:"end_reason"`
	// ClockBelief says the client's own (skewed) clock kept the lease
	// alive past its ttl; Stalled (ns) that the client was paused for that
	// long after checking its lease, and woke still believing in it.
	ClockBelief bool  `json:"client_clock_belief,omitempty"`
	Stalled     int64 `json:"stalled_ns,omitempty"`

	expiry int64
	tokenN uint64
	// first and last are the holder's writes on the lock's key with its
	// token, sent while this lease was its lease: a list in call order
	// through the Finder's writes (1-based; 0: none).
	first, last int32
}

// Overlap is a period in which two leases on one key were both believed
// valid. Older is the lease with the smaller token: the one whose writes a
// resource must reject.
type Overlap struct {
	Key          string `json:"key"`
	Older, Newer Lease  `json:"-"`
	OlderProcess int    `json:"older_process"`
	OlderToken   string `json:"older_token"`
	NewerProcess int    `json:"newer_process"`
	NewerToken   string `json:"newer_token"`
	Start        int64  `json:"start_ns"`
	End          int64  `json:"end_ns"`
	// Writes by the older holder with its token, sent during the overlap, by
	// outcome: Rejected are the ones fencing stopped (stale).
	Rejected int `json:"rejected_writes"`
	Accepted int `json:"accepted_writes"`
	Unknown  int `json:"unknown_writes"`
	// WriteIDs are those writes' invoke indices.
	WriteIDs []int64 `json:"write_ids,omitempty"`
}

// Duration is how long both leases were believed valid.
func (o Overlap) Duration() time.Duration { return time.Duration(o.End - o.Start) }

// Text says what happened in words.
func (o Overlap) Text() string {
	s := fmt.Sprintf("%s: process %d (token %s) and process %d (token %s) both believed they held the lease for %s, from %s to %s",
		o.Key, o.Older.Process, o.Older.Token, o.Newer.Process, o.Newer.Token,
		roundDur(o.Duration()), seconds(o.Start), seconds(o.End))
	switch {
	case o.Older.Stalled > 0:
		s += fmt.Sprintf(" (process %d was paused for %s after checking its lease: it woke still believing in it)", o.Older.Process, roundDur(time.Duration(o.Older.Stalled)))
	case o.Older.ClockBelief:
		s += fmt.Sprintf(" (process %d's clock was off: it still believed in its lease after the ttl ran out)", o.Older.Process)
	}
	if n := o.Rejected + o.Accepted + o.Unknown; n > 0 {
		s += fmt.Sprintf("; the older holder wrote %d time(s) meanwhile: %d rejected as stale by fencing, %d accepted, %d unknown",
			n, o.Rejected, o.Accepted, o.Unknown)
	}
	return s
}

// Report is what Find returns.
type Report struct {
	Leases int `json:"leases"`
	// Count is the number of overlaps; Overlaps lists them all (Report) or
	// only the earliest (Summary).
	Count    int       `json:"count"`
	Overlaps []Overlap `json:"overlaps"`
	// Total is the summed duration of all overlaps.
	Total time.Duration `json:"total_ns"`
	// Rejected counts the older holders' writes fencing rejected during
	// overlaps: what fencing saved the user from.
	Rejected int `json:"rejected_writes"`
}

// Anomalies turns the overlaps into findings (not violations) for results.
func (r Report) Anomalies() []checkers.Anomaly {
	out := make([]checkers.Anomaly, 0, len(r.Overlaps))
	for _, o := range r.Overlaps {
		ids := append([]int64{o.Older.AcquireID, o.Newer.AcquireID}, o.WriteIDs...)
		out = append(out, checkers.Anomaly{Kind: checkers.KindLeaseOverlap, Model: checkers.ModelLease, Key: o.Key,
			Text: o.Text(), Ops: ids, At: o.Start, Finding: true})
	}
	return out
}

// earlier orders overlaps as FirstAnomalies and Summary keep them.
func earlier(x, y *Overlap) bool {
	return sortsBefore(x.Start, x.Key, x.Older.AcquireID, x.Newer.AcquireID, y)
}

// sortsBefore is earlier for an overlap given by its sort fields.
func sortsBefore(start int64, key string, older, newer int64, y *Overlap) bool {
	if start != y.Start {
		return start < y.Start
	}
	if key != y.Key {
		return key < y.Key
	}
	if older != y.Older.AcquireID {
		return older < y.Older.AcquireID
	}
	return newer < y.Newer.AcquireID
}

// firstN keeps the n earliest of the overlaps it is offered, sorted (n is
// small).
type firstN struct {
	n    int
	kept []Overlap
}

// wants reports whether offer would keep an overlap with these Start, Key
// and leases' AcquireIDs.
func (f *firstN) wants(start int64, key string, older, newer int64) bool {
	return f.n > 0 && (len(f.kept) < f.n || sortsBefore(start, key, older, newer, &f.kept[f.n-1]))
}

// offer reports whether o is kept (for now).
func (f *firstN) offer(o *Overlap) bool {
	if f.n <= 0 || len(f.kept) == f.n && !earlier(o, &f.kept[f.n-1]) {
		return false
	}
	at := sort.Search(len(f.kept), func(k int) bool { return earlier(o, &f.kept[k]) })
	if len(f.kept) < f.n {
		f.kept = append(f.kept, Overlap{})
	}
	copy(f.kept[at+1:], f.kept[at:len(f.kept)-1])
	f.kept[at] = *o
	return true
}

// FirstAnomalies is Anomalies capped as checkers.CapAnomalies caps them (the
// earliest n), worded only for those kept: a long soak has an overlap per
// lease, and words for each cost more than finding them.
func (r Report) FirstAnomalies(n int) []checkers.Anomaly {
	first := firstN{n: n}
	for i := range r.Overlaps {
		first.offer(&r.Overlaps[i])
	}
	out := make([]checkers.Anomaly, 0, len(first.kept))
	for _, o := range first.kept {
		ids := append([]int64{o.Older.AcquireID, o.Newer.AcquireID}, o.WriteIDs...)
		out = append(out, checkers.Anomaly{Kind: checkers.KindLeaseOverlap, Model: checkers.ModelLease, Key: o.Key,
			Text: o.Text(), Ops: ids, At: o.Start, Finding: true})
	}
	return out
}

// Options tune Find.
type Options struct {
	// TTL is the lease length for acquires and renews whose event carries no
	// extra.ttl_ms.
	TTL time.Duration
}

// Finder computes leases and overlaps from a stream of events and the
// operations they complete. It does not pair events itself: the caller's
// Pairer (one per history) hands it each completed operation.
type Finder struct {
	opts   Options
	ttls   map[int64]time.Duration // invoke index -> ttl from extra
	active map[int]*Lease          // by process
	done   [][]Lease               // closed leases, in chunks
	// writes are the leases' writes (Lease.first), in chunks.
	writes  [][]write
	nwrites int
	leases  int // in done
	last    int64
	err     error
}

// NewFinder returns an empty Finder.
func NewFinder(opts Options) *Finder {
	return &Finder{opts: opts, ttls: map[int64]time.Duration{}, active: map[int]*Lease{}}
}

// write is what countWrites needs of a write by a lease's holder.
type write struct {
	id, call int64
	next     int32 // the lease's next write (1-based; 0: none)
	outcome  history.Outcome
	stale    bool
}

const writesChunk = 8192

// write is the i-th (1-based) write.
func (f *Finder) write(i int32) *write {
	i--
	return &f.writes[i/writesChunk][i%writesChunk]
}

// addWrite appends w to l's writes.
func (f *Finder) addWrite(l *Lease, w write) {
	if f.nwrites%writesChunk == 0 {
		f.writes = append(f.writes, make([]write, 0, writesChunk))
	}
	c := &f.writes[len(f.writes)-1]
	*c = append(*c, w)
	f.nwrites++
	i := int32(f.nwrites)
	if l.last != 0 {
		f.write(l.last).next = i
	} else {
		l.first = i
	}
	l.last = i
}

// Find pairs a whole history and runs a Finder over it.
func Find(events []history.Event, opts Options) (Report, error) {
	f := NewFinder(opts)
	p := history.NewPairer()
	for _, e := range events {
		op, err := p.Add(e)
		if err != nil {
			return Report{}, err
		}
		if err := f.Add(e, op); err != nil {
			return Report{}, err
		}
	}
	return f.Report(), nil
}

// Add consumes one event and the operation it completed (nil if none), as
// the caller's Pairer returned it for that event. Operations still open when
// the history ends are not given: their leases end with the history.
func (f *Finder) Add(e history.Event, completed *history.Op) error {
	if e.Time > f.last {
		f.last = e.Time
	}
	if e.IsClient() && e.Type == history.Invoke {
		if e.F == history.Acquire || e.F == history.Renew {
			ttl, err := f.ttlOf(e)
			if err != nil {
				return err
			}
			f.ttls[e.Index] = ttl
		}
		if e.F == history.Acquire {
			if l, ok := f.active[e.Process]; ok {
				f.end(l, e.Time, EndReacquired)
			}
		}
		if e.F == history.Write {
			if err := f.believe(e); err != nil {
				return err
			}
		}
	}
	if completed != nil {
		if raw, ok := e.Extra[history.ExtraGrantedTTL]; ok && (completed.F == history.Acquire || completed.F == history.Renew) {
			// The lease the system granted, not the one asked for: the
			// client's belief goes by the answer.
			var ms float64
			if err := json.Unmarshal(raw, &ms); err != nil || ms <= 0 {
				return fmt.Errorf("event %d: extra.%s %s is not a positive number", e.Index, history.ExtraGrantedTTL, raw)
			}
			f.ttls[completed.ID] = time.Duration(ms * float64(time.Millisecond))
		}
		f.apply(completed)
	}
	return nil
}

func (f *Finder) ttlOf(e history.Event) (time.Duration, error) {
	if raw, ok := e.Extra[history.ExtraTTL]; ok {
		var ms float64
		if err := json.Unmarshal(raw, &ms); err != nil {
			return 0, fmt.Errorf("event %d: extra.ttl_ms %s is not a number", e.Index, raw)
		}
		return time.Duration(ms * float64(time.Millisecond)), nil
	}
	if f.opts.TTL <= 0 {
		return 0, fmt.Errorf("event %d: %s has no extra.ttl_ms and no default lease ttl was given", e.Index, e.F)
	}
	return f.opts.TTL, nil
}

// believe extends the writer's lease to where its own clock said it ends,
// when the write carries that belief.
func (f *Finder) believe(e history.Event) error {
	raw, ok := e.Extra[history.ExtraLeaseLeft]
	if !ok {
		return nil
	}
	var ms float64
	if err := json.Unmarshal(raw, &ms); err != nil {
		return fmt.Errorf("event %d: extra.%s %s is not a number", e.Index, history.ExtraLeaseLeft, raw)
	}
	l := f.active[e.Process]
	if l == nil || l.Key != e.Key || ms <= 0 {
		return nil
	}
	var stalled float64
	if raw, ok := e.Extra[history.ExtraStalled]; ok {
		if err := json.Unmarshal(raw, &stalled); err != nil {
			return fmt.Errorf("event %d: extra.%s %s is not a number", e.Index, history.ExtraStalled, raw)
		}
	}
	if end := satAdd(e.Time, int64(ms*float64(time.Millisecond))); end > l.expiry {
		l.expiry = end
		if stalled > 0 {
			l.Stalled = int64(stalled * float64(time.Millisecond))
		} else {
			l.ClockBelief = true
		}
	}
	return nil
}

// end closes a lease at t (or at its expiry, if that came first).
func (f *Finder) end(l *Lease, t int64, reason string) {
	delete(f.active, l.Process)
	if l.expiry <= t {
		l.End, l.EndReason = l.expiry, EndExpired
	} else {
		l.End, l.EndReason = t, reason
	}
	if l.End > l.Start {
		// In chunks: one slice grown by doubling would hold up to twice
		// the leases' bytes (a soak has hundreds of thousands).
		if len(f.done) == 0 || len(f.done[len(f.done)-1]) == cap(f.done[len(f.done)-1]) {
			f.done = append(f.done, make([]Lease, 0, 4096))
		}
		last := &f.done[len(f.done)-1]
		*last = append(*last, *l)
		f.leases++
	}
}

func (f *Finder) apply(op *history.Op) {
	ttl := f.ttls[op.ID]
	delete(f.ttls, op.ID)
	l := f.active[op.Process]
	if op.F == history.Write && l != nil && op.Key == l.Key {
		// Only a write sent with the lease's token, while it was the
		// process's lease, can fall in an overlap of it (the overlap lies
		// within the lease, and a process runs one operation at a time, so
		// its lease at the completion is its lease at the call). What the
		// client sent is settled by now: a later strip event changes only
		// what the resource received.
		sent := op.Token.Raw
		if op.Tampered != "" {
			sent = op.SentByClient
		}
		if sent == l.Token {
			f.addWrite(l, write{id: op.ID, call: op.Call, outcome: op.Outcome, stale: op.Error == "stale"})
		}
	}
	if l != nil && op.Key == l.Key {
		switch {
		case op.F == history.Release:
			f.end(l, op.Call, EndReleased)
			return
		case op.F == history.Renew && op.Outcome == history.OutcomeOk:
			if op.Call < l.expiry {
				l.expiry = max(l.expiry, op.Call+int64(ttl))
			}
		case op.F == history.Renew && op.Outcome == history.OutcomeFail:
			f.end(l, op.Return, EndRenewFailed)
			return
		}
	}
	if op.Outcome == history.OutcomeInfo && l != nil {
		f.end(l, op.Completed, EndRetired)
		return
	}
	if op.F == history.Acquire && op.Outcome == history.OutcomeOk {
		f.active[op.Process] = &Lease{Key: op.Key, Process: op.Process, Token: op.Token.Raw,
			tokenN: op.Token.N, AcquireID: op.ID, Start: op.Return, expiry: satAdd(op.Call, int64(ttl))}
	}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Leases returns every lease seen so far, closed at the history's end.
func (f *Finder) Leases() []Lease {
	ps := f.sortedLeases()
	out := make([]Lease, len(ps))
	for i, l := range ps {
		out[i] = *l
	}
	return out
}

// sortedLeases is Leases without the copies (of all but the open ones),
// sorted by key, then start, then acquire.
func (f *Finder) sortedLeases() []*Lease {
	out := make([]*Lease, 0, f.leases+len(f.active))
	for _, c := range f.done {
		for i := range c {
			out = append(out, &c[i])
		}
	}
	for _, l := range f.active {
		c := *l
		if c.expiry <= f.last {
			c.End, c.EndReason = c.expiry, EndExpired
		} else {
			c.End, c.EndReason = f.last, EndHistoryEnded
		}
		if c.End > c.Start {
			out = append(out, &c)
		}
	}
	slices.SortFunc(out, func(x, y *Lease) int {
		if c := strings.Compare(x.Key, y.Key); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Start, y.Start); c != 0 {
			return c
		}
		return cmp.Compare(x.AcquireID, y.AcquireID)
	})
	return out
}

// Report computes the overlaps of every lease seen so far.
func (f *Finder) Report() Report { return f.report(-1) }

// Summary is Report keeping only the earliest n overlaps (in
// FirstAnomalies' order) in Overlaps; the counts and totals are of all. A
// soak has about an overlap per lease, each a few hundred bytes.
func (f *Finder) Summary(n int) Report { return f.report(max(n, 0)) }

// report keeps every overlap when keep < 0, else the earliest keep.
func (f *Finder) report(keep int) Report {
	leases := f.sortedLeases()
	if keep >= 0 {
		first := firstN{n: keep}
		rep := Report{Leases: len(leases)}
		f.overlaps(leases, &rep, first.wants, func(o *Overlap) { first.offer(o) })
		rep.Overlaps = first.kept
		return rep
	}
	// Count first: an Overlap holds two leases, and a soak has one per
	// lease, so growing the slice would copy them over and over.
	n := 0
	for i := range leases {
		a := leases[i]
		for j := i + 1; j < len(leases) && leases[j].Key == a.Key && leases[j].Start < a.End; j++ {
			if leases[j].Process != a.Process {
				n++
			}
		}
	}
	rep := Report{Leases: len(leases), Overlaps: make([]Overlap, 0, n)}
	f.overlaps(leases, &rep, func(int64, string, int64, int64) bool { return true }, func(o *Overlap) { rep.Overlaps = append(rep.Overlaps, *o) })
	return rep
}

// overlaps finds the overlaps of leases (sorted as Leases sorts them),
// counts them into rep and hands to keep each that wants (given its key,
// times and leases only) takes: the others are counted, never made.
func (f *Finder) overlaps(leases []*Lease, rep *Report, wants func(start int64, key string, older, newer int64) bool, keep func(*Overlap)) {
	for i := range leases {
		a := leases[i]
		// Leases are sorted by key then start: only later leases that start
		// before a ends can overlap it.
		for j := i + 1; j < len(leases) && leases[j].Key == a.Key && leases[j].Start < a.End; j++ {
			b := leases[j]
			if b.Process == a.Process {
				continue
			}
			older, newer := a, b
			if b.tokenN < a.tokenN {
				older, newer = b, a
			}
			start, end := b.Start, min(a.End, b.End)
			rep.Count++
			rep.Total += time.Duration(end - start)
			if !wants(start, a.Key, older.AcquireID, newer.AcquireID) {
				rep.Rejected += f.rejected(older, start, end)
				continue
			}
			o := Overlap{Key: a.Key, Older: *older, Newer: *newer,
				OlderProcess: older.Process, OlderToken: older.Token,
				NewerProcess: newer.Process, NewerToken: newer.Token,
				Start: start, End: end}
			f.countWrites(&o)
			rep.Rejected += o.Rejected
			keep(&o)
		}
	}
}

// rejected counts what countWrites counts as Rejected for an overlap of
// older from start to end.
func (f *Finder) rejected(older *Lease, start, end int64) int {
	n := 0
	for i := older.first; i != 0; i = f.write(i).next {
		w := f.write(i)
		if w.call > end {
			break
		}
		if w.call >= start && w.outcome == history.OutcomeFail && w.stale {
			n++
		}
	}
	return n
}

// countWrites finds the older holder's writes sent during the overlap.
func (f *Finder) countWrites(o *Overlap) {
	for i := o.Older.first; i != 0; i = f.write(i).next {
		w := f.write(i)
		if w.call < o.Start {
			continue
		}
		if w.call > o.End {
			break
		}
		o.WriteIDs = append(o.WriteIDs, w.id)
		switch w.outcome {
		case history.OutcomeOk:
			o.Accepted++
		case history.OutcomeFail:
			if w.stale {
				o.Rejected++
			} else {
				o.Unknown++
			}
		default:
			o.Unknown++
		}
	}
}

func seconds(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 3, 64) + " s"
}

func roundDur(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
