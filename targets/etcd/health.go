package etcd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// waitEtcdHealthy polls a member's /health until it reports healthy (it has
// a leader and serves linearizable reads) or timeout passes.
func waitEtcdHealthy(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := http.Client{Timeout: time.Second}
	var last error
	for time.Now().Before(deadline) {
		last = etcdHealth(ctx, &client, url)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("etcd at %s not healthy after %s: %v", url, timeout, last)
}

func etcdHealth(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return fmt.Errorf("reading /health: %w", err)
	}
	if h.Health != "true" {
		return fmt.Errorf("unhealthy: %s", h.Reason)
	}
	return nil
}

// metrics reads the named gauges from a member's /metrics (Prometheus text:
// "name value" lines, none of these with labels).
func metrics(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics answered %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if out[name], err = strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil {
			return nil, fmt.Errorf("%s/metrics: %s: %w", url, name, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("%s/metrics has no %s", url, n)
		}
	}
	return out, nil
}
