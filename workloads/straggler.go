package workloads

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Stragglers across a restart: a resource must keep each key's high-water
// mark through a crash, or a write held up across the restart (an expired
// holder's, a request stuck in a queue or a retry loop) with a token older
// than the mark it had accepted before is taken again. Nothing else in the
// traffic shows that flaw reliably: a holder has to wake exactly after the
// restart and before any newer write re-raises the mark, and a resource that
// keeps its values and forgets only the marks answers every read right. So
// when a node is back from a restart (the restart and power-loss nemeses
// call AfterRestart), stragglers write with such tokens at once.

// maxStragglers bounds the stragglers sent after one restart.
const maxStragglers = 8

// marks is, per key, what the clients saw accepted: the newest token and
// the newest one older than it.
type marks struct {
	mu    sync.Mutex
	byKey map[string]*mark
}

type mark struct {
	hi, lo tokenSeen
	at     time.Time // when the last accepted write returned
}

type tokenSeen struct {
	raw string
	n   uint64
}

// accepted notes an ok write of key with token raw.
func (m *marks) accepted(key, raw string) {
	t := history.ParseToken(raw)
	if t.State != history.TokenValid {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byKey == nil {
		m.byKey = map[string]*mark{}
	}
	k := m.byKey[key]
	if k == nil {
		k = &mark{}
		m.byKey[key] = k
	}
	k.at = time.Now()
	seen := tokenSeen{raw: raw, n: t.N}
	switch {
	case k.hi.raw == "" || t.N > k.hi.n:
		if k.hi.raw != "" {
			k.lo = k.hi
		}
		k.hi = seen
	case t.N < k.hi.n && (k.lo.raw == "" || t.N > k.lo.n):
		k.lo = seen
	}
}

// stale lists up to n keys with a token older than their mark, the longest
// idle first (a key no client writes soon after the restart keeps the
// forgotten mark forgotten until the straggler's write).
func (m *marks) stale(n int) (keys, tokens []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	type cand struct {
		key, token string
		at         time.Time
	}
	var cs []cand
	for key, k := range m.byKey {
		if k.lo.raw != "" {
			cs = append(cs, cand{key, k.lo.raw, k.at})
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if !cs[i].at.Equal(cs[j].at) {
			return cs[i].at.Before(cs[j].at)
		}
		return cs[i].key < cs[j].key
	})
	for _, c := range cs[:min(n, len(cs))] {
		keys, tokens = append(keys, c.key), append(tokens, c.token)
	}
	return keys, tokens
}

// recent lists up to n keys whose last accepted write returned most
// recently, the newest first.
func (m *marks) recent(n int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.byKey))
	for key := range m.byKey {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := m.byKey[keys[i]].at, m.byKey[keys[j]].at
		if !a.Equal(b) {
			return a.After(b)
		}
		return keys[i] < keys[j]
	})
	return keys[:min(n, len(keys))]
}

// extraReadBack, on a read-back, names the node whose restart it followed.
const extraReadBack = "read_back_after_restart_of"

// AfterRestart sends the stragglers of node's restart: on the keys a token
// older than the mark was accepted on, the longest idle first, each a
// process of its own writes once with that older token, right away. A
// resource that kept its marks rejects them as stale; one that forgot them
// accepts them, a violation the checkers name.
//
// It also reads back the keys written last before the restart, each once
// from a process of its own: a system that answered writes before they
// were durable (and lost them to the crash) returns the older value, a
// stale read the checkers name. Without them the loss shows only if a
// reader happens on that key before the next write covers it (a power
// cut on an fsync that lost acknowledged writes was found in one seed of
// two: docs/coverage.md).
func (w *Fenced) AfterRestart(node string) {
	// The lock keeps Run from waiting for the stragglers before they are
	// counted.
	w.runMu.Lock()
	defer w.runMu.Unlock()
	ctx, rec := w.runCtx, w.rec
	if ctx == nil || ctx.Err() != nil {
		return
	}
	readBack := map[string]json.RawMessage{extraReadBack: json.RawMessage(strconv.Quote(node))}
	for i, key := range w.marks.recent(maxStragglers) {
		w.stragglers.Add(1)
		go func() {
			defer w.stragglers.Done()
			r := w.newRecorder(rec)
			resource := w.cfg.Resources[i%len(w.cfg.Resources)]
			r.do(ctx, history.Event{F: history.Read, Key: key, Node: resource.Node(), Extra: readBack},
				func(c context.Context) Reply { return resource.Read(c, key) })
		}()
	}
	keys, tokens := w.marks.stale(maxStragglers)
	extra := map[string]json.RawMessage{history.ExtraStraggler: json.RawMessage(strconv.Quote(node))}
	for i, key := range keys {
		token := tokens[i]
		w.stragglers.Add(1)
		go func() {
			defer w.stragglers.Done()
			r := w.newRecorder(rec)
			resource := w.cfg.Resources[i%len(w.cfg.Resources)]
			v := w.value(r)
			r.do(ctx, history.Event{F: history.Write, Key: key, Token: token, Value: v, Node: resource.Node(), Extra: extra},
				func(c context.Context) Reply { return resource.Write(c, key, token, []byte(v)) })
		}()
	}
}
