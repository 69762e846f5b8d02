package docker_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// helpers lists the run's fault helper containers by kind, inspected.
func helpers(t *testing.T, run string) map[string][]container.InspectResponse {
	t.Helper()
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", docker.LabelRun+"="+run), filters.Arg("label", docker.LabelHelper))})
	require.NoError(t, err)
	out := map[string][]container.InspectResponse{}
	for _, c := range cs {
		info, err := cli.ContainerInspect(ctx, c.ID)
		if err != nil {
			continue // removed meanwhile
		}
		if info.State.Running {
			out[c.Labels[docker.LabelHelper]] = append(out[c.Labels[docker.LabelHelper]], info)
		}
	}
	return out
}

// Faults through the engine's API alone, as behind Docker Desktop or a
// remote DOCKER_HOST: the engine is reached through a TCP proxy and the
// host path is off. Each fault is measured from the other side: the
// network's gateway (this machine's side of the bridge, where the
// published port's traffic comes from) cannot reach a node cut off from
// it, and the node's own clock answers the step. Both survive a restart
// (a new helper gets the state), and the heal is exact.
func TestFaultsThroughEngineAPI(t *testing.T) {
	tag := probeImage(t)
	remote := dockertest.UseRemote(t)
	ctx := context.Background()
	run := fmt.Sprintf("engineapi-%d", time.Now().UnixNano())
	rt, err := docker.New(ctx, run, docker.Options{NoWatchdog: true, Log: testWriter{t}})
	require.NoError(t, err)
	defer func() {
		require.NoError(t, rt.Close(context.Background()))
		c, n := dockertest.Leftovers(t, run)
		assert.Zero(t, c+n, "leftovers, helpers included")
	}()
	nw, err := rt.Network(ctx)
	require.NoError(t, err)
	urls := map[string]string{}
	for i, node := range []string{"n1", "n2"} {
		c, err := rt.Run(ctx, docker.ContainerSpec{Node: node, Image: tag, IP: nw.HostIP(i),
			Cmd: []string{"/goprobe", "-http", "0.0.0.0:8080"}, Ports: []int{8080}, User: "1000:1000"})
		require.NoError(t, err)
		urls[node] = "http://" + c.Addr(8080) + "/now"
		eventually(t, urls[node], 0)
	}
	reachable := func(node string) bool {
		c := http.Client{Timeout: 500 * time.Millisecond}
		resp, err := c.Get(urls[node])
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}
	gw := nw.Subnet.IP.To4()
	gateway := net.IPv4(gw[0], gw[1], gw[2], 1).String()

	// Partition: n1 drops the gateway, n2 is untouched.
	begin := time.Now()
	require.NoError(t, rt.Partition(ctx, "n1", []string{gateway}))
	t.Logf("first partition (helper start + first rule): %v", time.Since(begin))
	assert.Equal(t, docker.PathAPI, rt.FaultPath("partition"))
	assert.False(t, reachable("n1"), "n1 is cut off from the gateway")
	assert.True(t, reachable("n2"))
	hs := helpers(t, run)["netcut"]
	require.Len(t, hs, 1)
	hc := hs[0].HostConfig
	assert.Equal(t, []string{"ALL"}, caps(hc.CapDrop))
	assert.Equal(t, []string{"NET_ADMIN"}, caps(hc.CapAdd), "the helper has one capability")
	assert.False(t, hc.Privileged)
	n1, err := rt.Container("n1")
	require.NoError(t, err)
	assert.Equal(t, "container:"+n1.ID, string(hc.NetworkMode))
	begin = time.Now()
	require.NoError(t, rt.Partition(ctx, "n1", []string{gateway, nw.HostIP(1)}))
	t.Logf("a later partition change: %v", time.Since(begin))
	assert.Len(t, helpers(t, run)["netcut"], 1, "one helper per node and namespace")

	// A restart: new namespaces, a new helper, the cut re-applied.
	require.NoError(t, rt.Kill(ctx, "n1"))
	begin = time.Now()
	require.NoError(t, rt.Start(ctx, "n1"))
	t.Logf("start with the cut re-applied: %v", time.Since(begin))
	assert.False(t, reachable("n1"), "the cut survives the restart")
	require.Eventually(t, func() bool { return len(helpers(t, run)["netcut"]) == 1 }, 10*time.Second, 100*time.Millisecond,
		"the old namespace's helper is gone")

	require.NoError(t, rt.HealAll(ctx))
	assert.True(t, reachable("n1"), "healed")
	assert.Empty(t, rt.Blocked("n1"))

	// Clock: the node's own clock answers the step, at once.
	require.NoError(t, rt.ClockReachable(ctx, "n1"))
	wall0, mono0 := time.Now().Round(0), time.Now()
	begin = time.Now()
	require.NoError(t, rt.SetClockOffset(ctx, "n1", 90*time.Second))
	t.Logf("first clock step (helper start + patch): %v", time.Since(begin))
	assert.Equal(t, docker.PathAPI, rt.FaultPath("clock"))
	assert.InDelta(t, 90, httpSkew(t, urls["n1"]).Seconds(), 0.1, "n1's own clock")
	assert.InDelta(t, 0, httpSkew(t, urls["n2"]).Seconds(), 0.1, "n2 is untouched")
	begin = time.Now()
	require.NoError(t, rt.SetClockOffset(ctx, "n1", -40*time.Second))
	t.Logf("a later clock change: %v", time.Since(begin))
	assert.InDelta(t, -40, httpSkew(t, urls["n1"]).Seconds(), 0.1)
	hs = helpers(t, run)["timewarp"]
	require.Len(t, hs, 1)
	hc = hs[0].HostConfig
	assert.Equal(t, []string{"SYS_PTRACE"}, caps(hc.CapAdd), "the helper has one capability")
	assert.Equal(t, []string{"ALL"}, caps(hc.CapDrop))
	assert.Equal(t, "container:"+n1.ID, string(hc.PidMode))
	assert.False(t, hc.Privileged)
	for _, node := range []string{"n1", "n2"} {
		info, err := rt.Client().ContainerInspect(ctx, mustContainer(t, rt, node).ID)
		require.NoError(t, err)
		assert.Empty(t, info.HostConfig.CapAdd, "%s's own container gets no capability", node)
		assert.False(t, info.HostConfig.Privileged)
	}

	// A restart during the fault: the new process's first answer is off.
	require.NoError(t, rt.Kill(ctx, "n1"))
	require.NoError(t, rt.Start(ctx, "n1"))
	assert.InDelta(t, -40, firstAnswer(t, urls["n1"]).Seconds(), 0.1, "the restarted process's first answer")
	assert.Equal(t, -40*time.Second, rt.ClockOffset("n1"))

	require.NoError(t, rt.SetClockOffset(ctx, "n1", 0))
	assert.Less(t, httpSkew(t, urls["n1"]).Abs(), 100*time.Millisecond, "healed")
	drift := time.Now().Round(0).Sub(wall0) - time.Since(mono0)
	assert.Less(t, drift.Abs(), 5*time.Millisecond, "this machine's clock moved")
	assert.Positive(t, remote.Conns(), "the engine was reached through the proxy")
}

// caps names capabilities without the CAP_ prefix that engines may add.
func caps(list []string) []string {
	out := make([]string, len(list))
	for i, c := range list {
		out[i] = strings.TrimPrefix(c, "CAP_")
	}
	return out
}

func mustContainer(t *testing.T, rt *docker.Runtime, node string) *docker.Container {
	t.Helper()
	c, err := rt.Container(node)
	require.NoError(t, err)
	return c
}
