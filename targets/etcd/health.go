package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
