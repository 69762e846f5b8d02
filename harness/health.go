package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"time"
)

// WaitHealthy polls GET /v1/health on every endpoint until all answer 200 or
// limit passes. Targets call it at the end of Start and after a node's
// restart; the run calls it after the final heal.
func WaitHealthy(ctx context.Context, eps Endpoints, limit time.Duration) error {
	return PollHealth(ctx, eps.All(), limit, nil)
}

// PollHealth is the one health poll: GET /v1/health on each node until every
// one answers 200, or limit passes (the error names each node still down and
// its last answer). gone, when set, is asked between polls whether a node can
// still come up (a program that exited cannot): its error ends the wait.
func PollHealth(ctx context.Context, nodes []Endpoint, limit time.Duration, gone func(node string) error) error {
	return HealthWait{Nodes: nodes, Limit: limit, Gone: gone}.Run(ctx)
}

// RefusedGrace is how long a node that is already running (HealthWait's
// Running) may refuse every connection before the wait gives up on it.
const RefusedGrace = 5 * time.Second

// HealthWait is one wait for nodes to answer GET /v1/health with 200. A
// status in ctx (Status.Context) shows what it waits for and the last
// answer: "waiting for n1 at http://127.0.0.1:7001 to answer GET
// /v1/health: connection refused".
type HealthWait struct {
	Nodes []Endpoint
	Limit time.Duration
	// Gone, when set, is asked between polls whether a node can still come
	// up (a program that exited cannot): its error ends the wait.
	Gone func(node string) error
	// Running names the nodes nobody starts (a spec's url nodes: someone
	// else's system, up or not): one that refuses every connection for
	// RefusedGrace has nothing listening, and waiting longer would not
	// change that, so the wait ends with that said.
	Running map[string]bool
}

// Run waits.
func (hw HealthWait) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, hw.Limit)
	defer cancel()
	status := statusOf(ctx)
	hc := &http.Client{Timeout: time.Second}
	last := map[string]string{}
	refusedSince := map[string]time.Time{}
	for _, e := range hw.Nodes {
		last[e.Node] = "no answer yet"
	}
	for {
		var down []Endpoint
		for _, e := range hw.Nodes {
			if _, up := last[e.Node]; !up {
				continue
			}
			if hw.Gone != nil {
				if err := hw.Gone(e.Node); err != nil {
					return err
				}
			}
			answer, refused, ok := healthy(ctx, hc, e.URL)
			if ok {
				delete(last, e.Node)
				continue
			}
			if answer != "" {
				last[e.Node] = answer
			}
			down = append(down, e)
			switch {
			case !refused:
				delete(refusedSince, e.Node)
			case refusedSince[e.Node].IsZero():
				refusedSince[e.Node] = time.Now()
			case hw.Running[e.Node] && time.Since(refusedSince[e.Node]) >= RefusedGrace:
				return fmt.Errorf("node %s at %s refused every connection for %s: nothing listens there, and fencecheck does not start it (is it running, and is the port right?)",
					e.Node, e.URL, RefusedGrace)
			}
		}
		if len(down) == 0 {
			return nil
		}
		if status != nil {
			status.Set(waitingFor(down, last, refusedSince))
		}
		select {
		case <-ctx.Done():
			names := make([]string, len(down))
			for i, e := range down {
				names[i] = e.Node
			}
			return downError(names, last, hw.Limit)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitingFor says what a health wait waits for, in words for the status
// line: the first node still down, its URL and its last answer.
func waitingFor(down []Endpoint, last map[string]string, refusedSince map[string]time.Time) string {
	e := down[0]
	answer := last[e.Node]
	if !refusedSince[e.Node].IsZero() {
		answer = "connection refused"
	}
	s := fmt.Sprintf("waiting for %s at %s to answer GET /v1/health: %s", e.Node, e.URL, answer)
	if len(down) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(down)-1)
	}
	return s
}

func downError(down []string, last map[string]string, limit time.Duration) error {
	sort.Strings(down)
	if len(down) == 1 {
		return fmt.Errorf("node %s did not answer GET /v1/health with 200 within %s (%s)", down[0], limit, last[down[0]])
	}
	why := make([]string, len(down))
	for i, n := range down {
		why[i] = n + ": " + last[n]
	}
	return fmt.Errorf("nodes %s did not answer GET /v1/health with 200 within %s (%s)", strings.Join(down, ", "), limit, strings.Join(why, "; "))
}

// healthy asks one node; when it is not healthy, answer says what it said
// ("" when the wait itself ended meanwhile: the answer before stands), and
// refused whether the connection was refused (nothing listening).
func healthy(ctx context.Context, hc *http.Client, base string) (answer string, refused, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/v1/health", nil)
	if err != nil {
		return err.Error(), false, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", false, false
		}
		return err.Error(), errors.Is(err, syscall.ECONNREFUSED), false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "answered " + resp.Status, false, false
	}
	return "", false, true
}
