package oracle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// The generator's record: one answer perturbed afterwards, and the history
// encoded as the project's recorder writes it.

// perturb changes one recorded answer, as a buggy system or recorder
// might: most such changes make the history invalid, some do not.
func (g *gen) perturb() {
	var done []*gop
	for _, o := range g.ops {
		if o.typ == "ok" || o.typ == "fail" {
			done = append(done, o)
		}
	}
	if len(done) == 0 {
		return
	}
	o := done[g.rng.IntN(len(done))]
	what := ""
	switch {
	case o.f == "read" && o.typ == "ok":
		switch g.rng.IntN(4) {
		case 0:
			o.resVal, what = fmt.Sprintf("v%d", 1+g.rng.IntN(4)), "read-value"
		case 1:
			t := parseToken(o.resTok)
			o.resTok, what = g.spell(t.n+1), "read-token"
		case 2:
			o.resTok, o.resVal, what = "", "", "read-404"
		default:
			o.resVal, what = "", "read-empty"
		}
	case o.f == "write" && o.typ == "ok":
		o.typ, o.err, what = "fail", "stale", "write-ok-to-stale"
		if g.chance(0.5) {
			o.hw = g.pick([]string{"0", "1", "2", "3"})
		}
	case o.f == "write" && o.err == "stale":
		if g.chance(0.5) {
			o.typ, o.err, o.hw, what = "ok", "", "", "write-stale-to-ok"
		} else {
			o.hw, what = g.pick([]string{"0", "1", "2", "3", "4", "05"}), "high-water"
		}
	case o.f == "acquire" && o.typ == "ok":
		t := parseToken(o.resTok)
		if t.n > 0 && g.chance(0.5) {
			t.n--
		} else {
			t.n++
		}
		o.resTok, what = g.spell(t.n), "acquire-token"
	case o.typ == "fail":
		o.typ, o.err, what = "ok", "", "fail-to-ok"
		if o.f == "acquire" {
			o.resTok = g.spell(uint64(1 + g.rng.IntN(4)))
		}
	default:
		o.typ, o.err, what = "fail", "lost", "ok-to-fail"
	}
	g.label += "+perturbed:" + what
}

// wireEvent is one history line as the project's recorder writes it.
type wireEvent struct {
	Index     int64                      `json:"index"`
	Time      int64                      `json:"time"`
	Process   int                        `json:"process"`
	Type      string                     `json:"type"`
	F         string                     `json:"f"`
	Key       string                     `json:"key,omitempty"`
	Token     string                     `json:"token,omitempty"`
	Value     string                     `json:"value,omitempty"`
	Error     string                     `json:"error,omitempty"`
	HighWater string                     `json:"high_water,omitempty"`
	Extra     map[string]json.RawMessage `json:"extra,omitempty"`
}

func (g *gen) encode() []byte {
	var evs []wireEvent
	add := func(e wireEvent) { evs = append(evs, e) }
	for _, o := range g.ops {
		inv := wireEvent{Time: o.call, Process: o.process, Type: "invoke", F: o.f, Key: o.key}
		if o.f == "write" && !o.jepsenStyle {
			inv.Token, inv.Value = o.sent, o.value
		}
		if o.f == "renew" || o.f == "release" {
			inv.Token = o.sent
		}
		add(inv)
		if o.tamper != "" {
			x := map[string]json.RawMessage{"mode": jsonString(o.tamper), "sent_by_client": jsonString(o.sent)}
			add(wireEvent{Time: o.tamperAt, Process: -1, Type: "info", F: "strip", Key: o.key,
				Token: o.recv, Value: o.value, Extra: x})
		}
		if o.never {
			continue
		}
		c := wireEvent{Time: o.ret, Process: o.process, Type: o.typ, F: o.f, Key: o.key, Error: o.err, HighWater: o.hw}
		switch o.f {
		case "write":
			c.Token, c.Value = o.sent, o.value
		case "renew", "release":
			c.Token = o.sent
		case "acquire", "read":
			if o.typ == "ok" {
				c.Token, c.Value = o.resTok, o.resVal
			}
		}
		add(c)
	}
	if g.strip {
		add(wireEvent{Time: 0, Process: -1, Type: "info", F: "strip", Extra: map[string]json.RawMessage{"action": jsonString("start")}})
	}
	if g.chance(0.2) {
		// A run that records its own events, and completed (history/run.go:
		// a run without a complete end event cannot pass the gate, which
		// is no linearizability question).
		end := int64(0)
		for _, e := range evs {
			end = max(end, e.Time)
		}
		add(wireEvent{Time: 1, Process: -1, Type: "info", F: "run", Extra: map[string]json.RawMessage{"action": jsonString("start")}})
		add(wireEvent{Time: 2, Process: -1, Type: "info", F: "pause", Extra: map[string]json.RawMessage{"action": jsonString("start")}})
		add(wireEvent{Time: end + 1, Process: -1, Type: "info", F: "run", Extra: map[string]json.RawMessage{"action": jsonString("end"), "complete": json.RawMessage("true")}})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for i := range evs {
		evs[i].Index = int64(i)
		if err := enc.Encode(&evs[i]); err != nil {
			panic(err)
		}
	}
	return b.Bytes()
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
