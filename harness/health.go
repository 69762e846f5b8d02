package harness

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// WaitHealthy polls GET /v1/health on every endpoint until all answer 200 or
// limit passes. Targets call it at the end of Start; the run calls it after
// the final heal.
func WaitHealthy(ctx context.Context, eps Endpoints, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	seen := map[string]bool{}
	var all []Endpoint
	for _, e := range append(append([]Endpoint{}, eps.Issuers...), eps.Resources...) {
		if !seen[e.URL] {
			seen[e.URL] = true
			all = append(all, e)
		}
	}
	hc := &http.Client{Timeout: time.Second}
	for {
		var down []string
		for _, e := range all {
			if !healthy(ctx, hc, e.URL) {
				down = append(down, e.Node)
			}
		}
		if len(down) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes not healthy after %s: %s", limit, strings.Join(down, ", "))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func healthy(ctx context.Context, hc *http.Client, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/v1/health", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
