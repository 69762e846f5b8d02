package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// `fencecheck clean` removes only the objects of runs whose harness is
// gone: a live run's network stays (and is listed), a dead one's goes, and
// so does one whose owner pid now belongs to another process (its start time
// differs). --all removes a live run's objects too, with a warning.
func TestCleanKeepsLiveRuns(t *testing.T) {
	dockertest.Require(t)
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	id := fmt.Sprintf("test-clean-%d", time.Now().UnixNano()%1e9)
	owners := map[string][2]string{ // pid, start time
		id + "-live":   {fmt.Sprint(os.Getpid())}, // this test: alive
		id + "-dead":   {"2147483646"},            // above any pid_max
		id + "-reused": {"1", "0"},                // pid 1 is alive, but did not start at tick 0
	}
	for run, owner := range owners {
		labels := map[string]string{docker.LabelProject: "1", docker.LabelRun: run, docker.LabelPID: owner[0]}
		if owner[1] != "" {
			labels[docker.LabelPIDStart] = owner[1]
		}
		_, err := cli.NetworkCreate(ctx, "fencecheck-"+run, network.CreateOptions{Labels: labels})
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for run := range owners {
			_, _ = docker.Sweep(context.Background(), cli, run)
		}
	})

	c := startCLI(t, "clean")
	require.Equal(t, 0, c.wait(t, 60*time.Second), c.stderr.String())
	assert.Contains(t, c.stdout.String(), "removed network fencecheck-"+id+"-dead")
	assert.Contains(t, c.stdout.String(), "removed network fencecheck-"+id+"-reused")
	assert.NotContains(t, c.stdout.String(), "removed network fencecheck-"+id+"-live")
	assert.Contains(t, c.stdout.String(), id+"-live (pid "+fmt.Sprint(os.Getpid())+")")
	_, n := dockertest.Leftovers(t, id+"-live")
	assert.Equal(t, 1, n, "the live run's network must stay")
	for _, run := range []string{id + "-dead", id + "-reused"} {
		_, n := dockertest.Leftovers(t, run)
		assert.Zero(t, n, "%s must be swept", run)
	}

	c = startCLI(t, "clean", "--run", id+"-live")
	require.Equal(t, 0, c.wait(t, 60*time.Second), c.stderr.String())
	assert.Contains(t, c.stdout.String(), "kept run "+id+"-live: its harness (pid")
	_, n = dockertest.Leftovers(t, id+"-live")
	assert.Equal(t, 1, n)

	// --all (scoped to this run here: the machine is shared).
	c = startCLI(t, "clean", "--all", "--run", id+"-live")
	require.Equal(t, 0, c.wait(t, 60*time.Second), c.stderr.String())
	assert.Contains(t, c.stderr.String(), "warning: --all removes")
	assert.Contains(t, c.stdout.String(), "removed network fencecheck-"+id+"-live")
	_, n = dockertest.Leftovers(t, id+"-live")
	assert.Zero(t, n)
}
