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

// PollHealth is the one health poll: GET /v1/health on each node until every
// one answers 200, or limit passes (the error names each node still down and
// its last answer). gone, when set, is asked between polls whether a node can
// still come up (a program that exited cannot): its error ends the wait.
func PollHealth(ctx context.Context, nodes []Endpoint, limit time.Duration, gone func(node string) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	last := map[string]string{}
	for _, e := range nodes {
		last[e.Node] = "no answer yet"
	}
	for {
		var down []string
		for _, e := range nodes {
			if _, up := last[e.Node]; !up {
				continue
			}
			if gone != nil {
				if err := gone(e.Node); err != nil {
					return err
				}
			}
			answer, ok := healthy(ctx, hc, e.URL)
			if ok {
				delete(last, e.Node)
				continue
			}
			if answer != "" {
				last[e.Node] = answer
			}
			down = append(down, e.Node)
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
// ("" when the wait itself ended meanwhile: the answer before stands).
func healthy(ctx context.Context, hc *http.Client, base string) (answer string, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/v1/health", nil)
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
}
