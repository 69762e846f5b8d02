package historytest

import (
	"container/heap"
	"fmt"
	"math/rand"
	"sort"
	"strconv"

	"github.com/fencecheck/fencecheck/history"
)

// GenConfig shapes a generated history. Zero fields take the defaults noted.
type GenConfig struct {
	// Ops is the approximate number of client operations (default 1000).
	Ops int
	// Keys is the number of resource keys, each with a lock of the same name
	// (default 4).
	Keys int
	// ClientsPerKey is the number of writer clients per key, each looping
	// acquire → write → maybe read → release (default 5).
	ClientsPerKey int
	// ReadersPerKey is the number of clients that only read (default 1).
	ReadersPerKey int
	// ReadAfterWrite is the chance a writer reads after writing (default 0.5).
	ReadAfterWrite float64
	// InfoRate is the chance an operation times out: the client records
	// info and takes a new process; a timed-out write still takes effect
	// (possibly later) with probability 1/2.
	InfoRate float64
	// HeldRate is the chance an acquire is refused as held (default 0.2).
	HeldRate float64
	// WritesPerToken is how many writes a holder makes with one token; more
	// than 1 only makes sense under equal=accept (default 1).
	WritesPerToken int
	// PlantStaleRead makes one read in the second half of the history return
	// the value before the latest accepted write, which completed before the
	// read began: the history is then not linearizable.
	PlantStaleRead bool
	Seed           int64
}

func (c *GenConfig) defaults() {
	if c.Ops <= 0 {
		c.Ops = 1000
	}
	if c.Keys <= 0 {
		c.Keys = 4
	}
	if c.ClientsPerKey <= 0 {
		c.ClientsPerKey = 5
	}
	if c.ReadersPerKey < 0 {
		c.ReadersPerKey = 0
	} else if c.ReadersPerKey == 0 {
		c.ReadersPerKey = 1
	}
	if c.ReadAfterWrite == 0 {
		c.ReadAfterWrite = 0.5
	}
	if c.HeldRate == 0 {
		c.HeldRate = 0.2
	}
	if c.WritesPerToken <= 0 {
		c.WritesPerToken = 1
	}
}

// Generate simulates clients against a correct fencing server (per-lock
// counters; per-key high-water, value and token; equal tokens rejected unless
// WritesPerToken > 1, when they are accepted) and records the history. Every
// operation takes effect at one instant inside its interval, so the history
// is linearizable unless PlantStaleRead is set. Same config, same history.
func Generate(cfg GenConfig) []history.Event {
	cfg.defaults()
	g := &gen{cfg: cfg, rng: rand.New(rand.NewSource(cfg.Seed)), accept: cfg.WritesPerToken > 1}
	g.keys = make([]*genKey, cfg.Keys)
	for i := range g.keys {
		g.keys[i] = &genKey{name: "r" + strconv.Itoa(i)}
	}
	for k := range g.keys {
		for range cfg.ClientsPerKey {
			g.newClient(k, false)
		}
		for range cfg.ReadersPerKey {
			g.newClient(k, true)
		}
	}
	for g.q.Len() > 0 && g.done < cfg.Ops {
		a := heap.Pop(&g.q).(*action)
		g.now = a.at
		a.run()
	}
	// Operations still in flight stay open: the run "ended".
	sort.SliceStable(g.events, func(i, j int) bool { return g.events[i].Time < g.events[j].Time })
	for i := range g.events {
		g.events[i].Index = int64(i)
	}
	return g.events
}

type genKey struct {
	name    string
	counter uint64
	written bool
	hw      uint64
	value   string
	// history of accepted writes that returned ok, for a planted stale read
	accepted []acceptedWrite
}

type acceptedWrite struct {
	value    string
	token    uint64
	returned int64 // Never-like -1 until it returns ok
}

type genClient struct {
	id      int
	key     int
	reader  bool
	process int
	token   uint64
	hasTok  bool
	writes  int
	seq     int
}

type gen struct {
	cfg      GenConfig
	rng      *rand.Rand
	accept   bool
	keys     []*genKey
	q        actionQueue
	now      int64
	seq      int
	nextProc int
	nextCID  int
	events   []history.Event
	done     int
	planted  bool
}

type action struct {
	at  int64
	seq int
	run func()
}

type actionQueue []*action

func (q actionQueue) Len() int { return len(q) }
func (q actionQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q actionQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *actionQueue) Push(x any)   { *q = append(*q, x.(*action)) }
func (q *actionQueue) Pop() any {
	old := *q
	a := old[len(old)-1]
	*q = old[:len(old)-1]
	return a
}

func (g *gen) at(t int64, fn func()) {
	g.seq++
	heap.Push(&g.q, &action{at: t, seq: g.seq, run: fn})
}

// us returns a random duration in [lo, hi) microseconds, in ns.
func (g *gen) us(lo, hi int) int64 { return int64(lo+g.rng.Intn(hi-lo)) * 1000 }

func (g *gen) record(e history.Event) {
	e.Time = g.now
	g.events = append(g.events, e)
}

func (g *gen) newClient(key int, reader bool) {
	c := &genClient{id: g.nextCID, key: key, reader: reader, process: g.nextProc}
	g.nextCID++
	g.nextProc++
	g.at(g.now+g.us(0, 1000), func() { g.step(c) })
}

// step starts the client's next operation.
func (g *gen) step(c *genClient) {
	k := g.keys[c.key]
	switch {
	case c.reader:
		g.read(c, k)
	case !c.hasTok:
		g.acquire(c, k)
	case c.writes < g.cfg.WritesPerToken:
		g.write(c, k)
	default:
		g.release(c, k)
	}
}

// op runs one operation: invoke now, effect at a random point, completion
// after it. effect returns the completion event's type and fields; visible
// is false when the client will not see them. A timed-out op completes as
// info; its effect happens (maybe) anyway.
func (g *gen) op(c *genClient, inv history.Event, effect func(visible bool) history.Event, next func(ok bool, e history.Event)) {
	inv.Process, inv.Type = c.process, history.Invoke
	g.record(inv)
	lin := g.now + g.us(50, 1500)
	ret := lin + g.us(50, 1500)
	timeout := g.rng.Float64() < g.cfg.InfoRate
	if timeout {
		applies := g.rng.Intn(2) == 0
		lin = g.now + g.us(50, 6000)
		g.at(lin, func() {
			if applies {
				effect(false)
			}
		})
		g.at(g.now+3000*1000, func() {
			g.record(history.Event{Process: c.process, Type: history.Info, F: inv.F, Key: inv.Key, Error: "timeout"})
			g.done++
			c.process = g.nextProc // a process that saw info is retired
			g.nextProc++
			next(false, history.Event{Type: history.Info})
		})
		return
	}
	var done history.Event
	g.at(lin, func() { done = effect(true) })
	g.at(ret, func() {
		done.Process, done.F, done.Key = c.process, inv.F, inv.Key
		g.record(done)
		g.done++
		next(done.Type == history.Ok, done)
	})
}

func (g *gen) then(c *genClient) { g.at(g.now+g.us(0, 500), func() { g.step(c) }) }

func (g *gen) acquire(c *genClient, k *genKey) {
	g.op(c, history.Event{F: history.Acquire, Key: k.name}, func(bool) history.Event {
		if g.rng.Float64() < g.cfg.HeldRate {
			return history.Event{Type: history.Fail, Error: "held"}
		}
		k.counter++
		return history.Event{Type: history.Ok, Token: strconv.FormatUint(k.counter, 10)}
	}, func(ok bool, e history.Event) {
		if ok {
			c.token, _ = strconv.ParseUint(e.Token, 10, 64)
			c.hasTok, c.writes = true, 0
		}
		g.then(c)
	})
}

func (g *gen) write(c *genClient, k *genKey) {
	c.seq++
	value := fmt.Sprintf("c%d-%d", c.id, c.seq)
	tok := c.token
	g.op(c, history.Event{F: history.Write, Key: k.name, Token: strconv.FormatUint(tok, 10), Value: value}, func(bool) history.Event {
		if !k.written || tok > k.hw || (g.accept && tok == k.hw) {
			k.written, k.hw, k.value = true, tok, value
			k.accepted = append(k.accepted, acceptedWrite{value: value, token: tok, returned: -1})
			return history.Event{Type: history.Ok, Token: strconv.FormatUint(tok, 10), Value: value}
		}
		return history.Event{Type: history.Fail, Token: strconv.FormatUint(tok, 10), Value: value,
			Error: "stale", HighWater: strconv.FormatUint(k.hw, 10)}
	}, func(ok bool, e history.Event) {
		if ok {
			// k.accepted may have grown (and moved): find by value.
			for i := len(k.accepted) - 1; i >= 0; i-- {
				if k.accepted[i].value == value {
					k.accepted[i].returned = g.now
					break
				}
			}
		}
		c.writes++
		if e.Type == history.Fail {
			c.writes = g.cfg.WritesPerToken // fenced off: give the token up
		}
		if e.Type != history.Info && g.rng.Float64() < g.cfg.ReadAfterWrite {
			g.at(g.now+g.us(0, 300), func() { g.read(c, k) })
			return
		}
		g.then(c)
	})
}

func (g *gen) read(c *genClient, k *genKey) {
	call := g.now
	g.op(c, history.Event{F: history.Read, Key: k.name}, func(visible bool) history.Event {
		if visible && g.cfg.PlantStaleRead && !g.planted && g.done > g.cfg.Ops/2 {
			// The latest accepted write that returned before this read
			// began, and the one before it.
			for i := len(k.accepted) - 1; i >= 1; i-- {
				if r := k.accepted[i].returned; r >= 0 && r < call {
					g.planted = true
					old := k.accepted[i-1]
					return history.Event{Type: history.Ok, Value: old.value, Token: strconv.FormatUint(old.token, 10)}
				}
			}
		}
		if !k.written {
			return history.Event{Type: history.Ok}
		}
		return history.Event{Type: history.Ok, Value: k.value, Token: strconv.FormatUint(k.hw, 10)}
	}, func(bool, history.Event) { g.then(c) })
}

func (g *gen) release(c *genClient, k *genKey) {
	tok := strconv.FormatUint(c.token, 10)
	g.op(c, history.Event{F: history.Release, Key: k.name, Token: tok}, func(bool) history.Event {
		return history.Event{Type: history.Ok}
	}, func(bool, history.Event) {
		c.hasTok = false
		g.then(c)
	})
}
