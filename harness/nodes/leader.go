package nodes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// HasLeader says whether any node declares a Leads probe.
func (c *Cluster) HasLeader() bool {
	for _, m := range c.members {
		if m.Leads != nil {
			return true
		}
	}
	return false
}

// FindLeader asks each node's Leads probe, in table order, and names the
// first that says yes. Each question is bounded to a second or so: a paused
// or cut-off node simply does not count.
func (c *Cluster) FindLeader(ctx context.Context) (string, error) {
	if _, err := c.running(); err != nil {
		return "", err
	}
	hc := &http.Client{Timeout: time.Second}
	var last []string
	for _, m := range c.members {
		if m.Leads == nil {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		said, _, yes := c.ask(hc, m, *m.Leads).Ask(actx)
		cancel()
		if yes {
			return m.Name, nil
		}
		if said != "" {
			last = append(last, m.Name+": "+said)
		}
	}
	if len(last) == 0 {
		return "", errors.New("no node says it leads")
	}
	return "", fmt.Errorf("no node says it leads (%v)", last)
}
