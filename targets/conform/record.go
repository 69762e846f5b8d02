package conform

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

// The preflight's requests are evidence: with Options.Record, each request
// that is a Fencing API operation (acquire, renew, release, write, read) is
// recorded as a client operation, invoke before it is sent and completion
// after, classified as the workload's client classifies answers (2xx ok; a
// definite rejection fail; anything else info). The same checkers then
// judge them: a stale write the system accepted in the preflight is a
// violation in the history like any other.

// Recorder records one operation: it gets the invoke event (no index, time
// or process) and returns the function that records its completion.
type Recorder = func(invoke history.Event) (complete func(history.Event))

// ExtraOwner is, on a recorded lock operation's invoke, the owner it was
// sent for: a recorder gives each owner one process.
const ExtraOwner = "owner"

// maxRecordedValue bounds the values recorded as they are: a larger body
// (the 1 MiB check) is recorded as its digest, on writes and reads alike,
// so reads still identify their write.
const maxRecordedValue = 4096

func recordedValue(b []byte) string {
	if len(b) <= maxRecordedValue {
		return string(b)
	}
	return fmt.Sprintf("sha256:%x (%d bytes)", sha256.Sum256(b), len(b))
}

// observe starts the record of one request, or returns nil when it is not
// an operation (health, an unknown route, a wrong method).
func (c *checker) observe(base, method, path string, header map[string]string, body []byte) func(answer) {
	if c.opts.Record == nil {
		return nil
	}
	node := c.nodes[base]
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	unescape := func(s string) string {
		if u, err := url.PathUnescape(s); err == nil {
			return u
		}
		return s
	}
	var inv history.Event
	switch {
	case method == http.MethodPost && len(parts) == 4 && parts[0] == "v1" && parts[1] == "locks":
		switch parts[3] {
		case "acquire":
			inv = history.Event{F: history.Acquire}
		case "renew":
			inv = history.Event{F: history.Renew}
		case "release":
			inv = history.Event{F: history.Release}
		default:
			return nil
		}
		inv.Key = unescape(parts[2])
		var lb struct {
			Owner string          `json:"owner"`
			Token string          `json:"token"`
			TTL   json.RawMessage `json:"ttl_ms"`
		}
		_ = json.Unmarshal(body, &lb)
		inv.Token = lb.Token
		// The owner names the client (the recorder keeps one process per
		// owner, so a lease ends with its owner's release), the ttl the
		// lease asked for.
		inv.Extra = map[string]json.RawMessage{}
		if o, err := json.Marshal(lb.Owner); err == nil && lb.Owner != "" {
			inv.Extra[ExtraOwner] = o
		}
		var ms int64
		if json.Unmarshal(lb.TTL, &ms) == nil && ms > 0 && inv.F != history.Release {
			inv.Extra[history.ExtraTTL] = lb.TTL
		}
	case (method == http.MethodPut || method == http.MethodGet) && len(parts) == 3 && parts[0] == "v1" && parts[1] == "resources":
		inv = history.Event{F: history.Read, Key: unescape(parts[2])}
		if method == http.MethodPut {
			inv.F, inv.Token, inv.Value = history.Write, header[fencing.TokenHeader], recordedValue(body)
		}
	default:
		return nil
	}
	inv.Node = node
	complete := c.opts.Record(inv)
	return func(a answer) {
		done := history.Event{F: inv.F, Key: inv.Key, Node: node, Type: history.Info}
		if inv.F != history.Acquire && inv.F != history.Read {
			done.Token, done.Value = inv.Token, inv.Value
		}
		switch {
		case a.err != nil:
			done.Error = "connection"
		case a.status/100 == 2 && inv.F == history.Read:
			if tok := a.header.Get(fencing.TokenHeader); tok != "" {
				done.Type, done.Token, done.Value = history.Ok, tok, recordedValue(a.body)
			} else {
				done.Error = fencing.ErrWordBadResponse
			}
		case a.status/100 == 2 && inv.F == history.Acquire:
			var lr fencing.LockResponse
			if err := json.Unmarshal(a.body, &lr); err == nil && lr.Token != "" {
				done.Type, done.Token = history.Ok, lr.Token
			} else {
				done.Error = fencing.ErrWordBadResponse
			}
		case a.status/100 == 2:
			done.Type = history.Ok
		case a.status == http.StatusNotFound && inv.F == history.Read:
			done.Type = history.Ok // never written
		case a.status == http.StatusConflict || a.status == http.StatusPreconditionRequired || a.status == http.StatusBadRequest ||
			a.status == http.StatusForbidden || a.status == http.StatusRequestEntityTooLarge || a.status == http.StatusNotFound:
			done.Type = history.Fail
			var eb fencing.ErrorBody
			if json.Unmarshal(a.body, &eb) == nil && eb.Error != "" {
				done.Error, done.HighWater = eb.Error, eb.HighWater
			} else {
				done.Error = fmt.Sprintf("http-%d", a.status)
			}
		default:
			done.Error = fmt.Sprintf("http-%d", a.status)
		}
		complete(done)
	}
}
