package harness

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// WaitHealthy polls GET /v1/health on every endpoint until all answer 200 or
// limit passes. Targets call it at the end of Start and after a node's
// restart; the run calls it after the final heal.
func WaitHealthy(ctx context.Context, eps Endpoints, limit time.Duration) error {
	return PollHealth(ctx, eps.All(), limit, nil)
}

// PollHealth is Poll with GET /v1/health on each endpoint.
func PollHealth(ctx context.Context, nodes []Endpoint, limit time.Duration, gone func(node string) error) error {
	hc := &http.Client{Timeout: time.Second}
	checks := make([]Check, len(nodes))
	for i, e := range nodes {
		checks[i] = HTTPCheck(hc, e.Node, strings.TrimRight(e.URL, "/")+"/v1/health")
	}
	return Poll(ctx, checks, limit, gone)
}

// Check asks one node once whether it serves.
type Check struct {
	Node string
	// What names the check in errors ("GET /v1/health with 200").
	What string
	// Ask returns "" and true when the node serves; otherwise what it
	// answered ("" when the wait itself ended meanwhile: the answer before
	// stands).
	Ask func(ctx context.Context) (answer string, ok bool)
}

// HTTPCheck is a GET of url that must answer 200.
func HTTPCheck(hc *http.Client, node, url string) Check {
	path := url
	if i := strings.Index(url, "://"); i >= 0 {
		if j := strings.Index(url[i+3:], "/"); j >= 0 {
			path = url[i+3+j:]
		}
	}
	return Check{Node: node, What: "GET " + path + " with 200", Ask: func(ctx context.Context) (string, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err.Error(), false
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return "", false
			}
			return err.Error(), false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "answered " + resp.Status, false
		}
		return "", true
	}}
}

// Poll is the one health poll: each check until every node serves, or
// limit passes (the error names each node still down and its last answer).
// gone, when set, is asked between polls whether a node can still come up
// (a program that exited cannot): its error ends the wait.
func Poll(ctx context.Context, checks []Check, limit time.Duration, gone func(node string) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	last := map[string]string{}
	for _, c := range checks {
		last[c.Node] = "no answer yet"
	}
	for {
		var down []Check
		for _, c := range checks {
			if _, up := last[c.Node]; !up {
				continue
			}
			if gone != nil {
				if err := gone(c.Node); err != nil {
					return err
				}
			}
			answer, ok := c.Ask(ctx)
			if ok {
				delete(last, c.Node)
				continue
			}
			if answer != "" {
				last[c.Node] = answer
			}
			down = append(down, c)
		}
		if len(down) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return downError(down, last, limit)
		case <-time.After(50 * time.Millisecond):
		}
	}
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
