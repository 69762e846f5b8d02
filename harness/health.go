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

// Check asks one node once whether it serves.
type Check struct {
	Node string
	// What names the question in errors and the status line ("GET
	// /v1/health with 200"); Where is the address asked.
	What, Where string
	// Ask returns ok when the node serves; otherwise what it answered (""
	// when the wait itself ended meanwhile: the answer before stands), and
	// whether the connection was refused (nothing listening).
	Ask func(ctx context.Context) (answer string, refused, ok bool)
}

// HTTPCheck is a GET of url that must answer 200.
func HTTPCheck(hc *http.Client, node, url string) Check {
	path := url
	if i := strings.Index(url, "://"); i >= 0 {
		if j := strings.Index(url[i+3:], "/"); j >= 0 {
			path = url[i+3+j:]
		}
	}
	return Check{Node: node, What: "GET " + path + " with 200", Where: strings.TrimSuffix(url, path),
		Ask: func(ctx context.Context) (string, bool, bool) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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
		}}
}

// HealthWait is one wait for nodes to serve: Nodes answering GET /v1/health
// with 200, and Checks of any other kind. A status in ctx (Status.Context)
// shows what it waits for and the last answer: "waiting for n1 at
// http://127.0.0.1:7001 to answer GET /v1/health: connection refused".
type HealthWait struct {
	Nodes  []Endpoint
	Checks []Check
	Limit  time.Duration
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
	checks := append([]Check(nil), hw.Checks...)
	hc := &http.Client{Timeout: time.Second}
	for _, e := range hw.Nodes {
		checks = append(checks, HTTPCheck(hc, e.Node, strings.TrimRight(e.URL, "/")+"/v1/health"))
	}
	last := map[string]string{}
	refusedSince := map[string]time.Time{}
	for _, c := range checks {
		last[c.Node] = "no answer yet"
	}
	for {
		var down []Check
		for _, c := range checks {
			if _, up := last[c.Node]; !up {
				continue
			}
			if hw.Gone != nil {
				if err := hw.Gone(c.Node); err != nil {
					return err
				}
			}
			answer, refused, ok := c.Ask(ctx)
			if ok {
				delete(last, c.Node)
				continue
			}
			if answer != "" {
				last[c.Node] = answer
			}
			down = append(down, c)
			switch {
			case !refused:
				delete(refusedSince, c.Node)
			case refusedSince[c.Node].IsZero():
				refusedSince[c.Node] = time.Now()
			case hw.Running[c.Node] && time.Since(refusedSince[c.Node]) >= RefusedGrace:
				return fmt.Errorf("node %s at %s refused every connection for %s: nothing listens there, and fencecheck does not start it (is it running, and is the port right?)",
					c.Node, c.Where, RefusedGrace)
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
			return downError(down, last, hw.Limit)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitingFor says what a health wait waits for, in words for the status
// line: the first node still down, where it is asked and its last answer.
func waitingFor(down []Check, last map[string]string, refusedSince map[string]time.Time) string {
	c := down[0]
	answer := last[c.Node]
	if !refusedSince[c.Node].IsZero() {
		answer = "connection refused"
	}
	s := fmt.Sprintf("waiting for %s at %s to answer %s: %s", c.Node, c.Where, strings.TrimSuffix(c.What, " with 200"), answer)
	if len(down) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(down)-1)
	}
	return s
}

func downError(down []Check, last map[string]string, limit time.Duration) error {
	sort.Slice(down, func(i, j int) bool { return down[i].Node < down[j].Node })
	if len(down) == 1 {
		c := down[0]
		return fmt.Errorf("node %s did not answer %s within %s (%s)", c.Node, c.What, limit, last[c.Node])
	}
	what, names, why := down[0].What, make([]string, len(down)), make([]string, len(down))
	for i, c := range down {
		names[i], why[i] = c.Node, c.Node+": "+last[c.Node]
		if c.What != what {
			what = "their health checks"
		}
	}
	return fmt.Errorf("nodes %s did not answer %s within %s (%s)", strings.Join(names, ", "), what, limit, strings.Join(why, "; "))
}
