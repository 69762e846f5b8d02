package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

// A node nobody starts (a url node) that refuses every connection has
// nothing listening: the wait gives up after RefusedGrace, saying so,
// instead of waiting out its limit (before: 30 s of silence). A node
// fencecheck starts may refuse while it comes up: that wait runs to its
// limit. Meanwhile the status line says what the wait is at.
func TestHealthWaitGivesUpOnARefusingRunningNode(t *testing.T) {
	url := closedURL(t)
	var out bytes.Buffer
	st := StartStatus(&out, "setup")
	start := time.Now()
	err := HealthWait{Nodes: []Endpoint{{Node: "n1", URL: url}}, Limit: 30 * time.Second,
		Running: map[string]bool{"n1": true}}.Run(st.Context(context.Background()))
	st.End()
	require.Error(t, err)
	assert.Less(t, time.Since(start), RefusedGrace+2*time.Second)
	assert.Equal(t, "node n1 at "+url+" refused every connection for 5s: nothing listens there, and fencecheck does not start it (is it running, and is the port right?)", err.Error())
	st.mu.Lock()
	assert.Equal(t, "waiting for n1 at "+url+" to answer GET /v1/health: connection refused", st.step)
	st.mu.Unlock()

	start = time.Now()
	err = HealthWait{Nodes: []Endpoint{{Node: "n1", URL: url}}, Limit: 1500 * time.Millisecond}.Run(context.Background())
	require.Error(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "a node fencecheck starts may refuse while it comes up")
	assert.Contains(t, err.Error(), "did not answer GET /v1/health with 200 within 1.5s")
}

// The status line: the step is the last line logged through it (or what a
// wait sets), with the phase's and the step's time; off a terminal it is
// printed only every 10 s of a step that lasts, and a log line clears a
// line shown on a terminal first.
func TestStatusShowsTheStepALongWaitIsAt(t *testing.T) {
	var out, log bytes.Buffer
	st := StartStatus(&out, "setup")
	st.End() // the ticker is stopped: print is driven by hand below
	fmt.Fprintln(st.Log(&log), "image etcd: compiling the etcd server (first time only: about a minute)")
	assert.Equal(t, "image etcd: compiling the etcd server (first time only: about a minute)\n", log.String())
	st.print()
	assert.Empty(t, out.String(), "a step of less than a second is not shown")
	st.stepAt = time.Now().Add(-12 * time.Second)
	st.start = st.stepAt.Add(-3 * time.Second)
	st.print()
	assert.Equal(t, "[setup 15s] image etcd: compiling the etcd server (first time only: about a minute) (12s)\n", out.String())
	st.print()
	assert.Equal(t, 1, strings.Count(out.String(), "\n"), "the next line comes 10 s later")

	st.tty, st.shown = true, 0
	out.Reset()
	st.print()
	assert.True(t, strings.HasPrefix(out.String(), "\r[setup 15s] image etcd"), "%q", out.String())
	out.Reset()
	fmt.Fprintln(st.Log(&out), "cluster ready")
	assert.True(t, strings.HasPrefix(out.String(), "\r   "), "the line is cleared before a log line: %q", out.String())
	assert.True(t, strings.HasSuffix(out.String(), "\rcluster ready\n"), "%q", out.String())
}
