package nodes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/fencecheck/fencecheck/harness"
)

// ask is one probe of a node, as a health check.
func (c *Cluster) ask(hc *http.Client, m *member, p Probe) harness.Check {
	addr := func() (string, error) {
		if m.Kind() == KindURL && p.Port == "" {
			return urlHost(m.URL), nil
		}
		return m.drv.hostAddr(m, p.Port)
	}
	switch {
	case p.HTTP != "" && m.Kind() == KindURL && p.Port == "":
		return harness.HTTPCheck(hc, m.Name, strings.TrimRight(m.URL, "/")+p.HTTP)
	case p.HTTP != "":
		a, err := addr()
		if err != nil {
			return failing(m.Name, err)
		}
		return harness.HTTPCheck(hc, m.Name, "http://"+a+p.HTTP)
	case p.Func != nil:
		return harness.Check{Node: m.Name, What: "its probe", Where: where(addr), Ask: func(ctx context.Context) (string, bool, bool) {
			a, err := addr()
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err = p.Func(pctx, a)
				cancel()
			}
			return answer(ctx, err)
		}}
	case p.Command != nil:
		return harness.Check{Node: m.Name, What: "its probe command", Where: "this machine", Ask: func(ctx context.Context) (string, bool, bool) {
			_, err := c.command(ctx, m, p.Command)
			return answer(ctx, err)
		}}
	}
	return harness.Check{Node: m.Name, What: "a TCP connection", Where: where(addr), Ask: func(ctx context.Context) (string, bool, bool) {
		a, err := addr()
		if err == nil {
			var conn net.Conn
			d := net.Dialer{Timeout: time.Second}
			if conn, err = d.DialContext(ctx, "tcp", a); err == nil {
				conn.Close()
			}
		}
		return answer(ctx, err)
	}}
}

// health is the node's health check: its probe, or GET /v1/health of an
// issuer or resource.
func (c *Cluster) health(hc *http.Client, m *member) harness.Check {
	p := m.Health.Probe
	if !p.set() && m.Serves() {
		p.HTTP = "/v1/health"
	}
	return c.ask(hc, m, p)
}

// set says whether the probe asks anything of its own.
func (p Probe) set() bool { return p.HTTP != "" || p.Func != nil || p.Command != nil || p.TCP }

// answer is a probe's outcome as a health check's.
func answer(ctx context.Context, err error) (string, bool, bool) {
	switch {
	case err == nil:
		return "", false, true
	case ctx.Err() != nil:
		return "", false, false
	}
	return err.Error(), errors.Is(err, syscall.ECONNREFUSED), false
}

// where is the address a check asks, for the status line.
func where(addr func() (string, error)) string {
	a, _ := addr()
	return a
}

func failing(node string, err error) harness.Check {
	return harness.Check{Node: node, What: "its health check", Ask: func(context.Context) (string, bool, bool) { return err.Error(), false, false }}
}

// command runs a probe command on this machine, its placeholders filled as
// this machine reaches the nodes, and returns its output (an error naming
// its status and output when it fails).
func (c *Cluster) command(ctx context.Context, m *member, argv []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("an empty command")
	}
	vars := merge(c.hostVars(), ownVars(m, "", ""))
	args := substituteAll(argv, vars)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	if m.Process != nil {
		cmd.Dir = m.Process.Dir
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errOut.String() + " " + out.String())
		if len(msg) > 200 {
			msg = msg[len(msg)-200:]
		}
		return "", fmt.Errorf("%s: %v %s", strings.Join(args, " "), err, msg)
	}
	return out.String(), nil
}

// hostVars are the {addr:...} placeholders as this machine reaches every
// started node.
func (c *Cluster) hostVars() map[string]string {
	return addrVars(c.members, func(m *member, port string) (string, bool) {
		a, err := m.drv.hostAddr(m, port)
		return a, err == nil
	})
}

// waitHealthy polls ms until each answers its health, or the longest of
// their timeouts (limit when > 0) passes; a program that exits first ends
// the wait at once.
func (c *Cluster) waitHealthy(ctx context.Context, ms []*member, limit time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	checks := make([]harness.Check, len(ms))
	longest := time.Duration(0)
	running := map[string]bool{}
	for i, m := range ms {
		checks[i] = c.health(hc, m)
		longest = max(longest, timeoutOf(m))
		// Nobody starts a url node: one that refuses every connection
		// has nothing listening, and waiting longer would not help.
		running[m.Name] = m.Kind() == KindURL
	}
	if limit <= 0 {
		limit = longest
	}
	err := harness.HealthWait{Checks: checks, Limit: limit, Gone: c.gone, Running: running}.Run(ctx)
	var exited exitedError
	if logs := logsOf(ms); err != nil && !errors.As(err, &exited) && len(logs) > 0 {
		err = fmt.Errorf("%w; see %s", err, strings.Join(logs, ", "))
	}
	return err
}

func timeoutOf(m *member) time.Duration {
	if m.Health.Timeout > 0 {
		return m.Health.Timeout
	}
	return DefaultHealthTimeout
}
