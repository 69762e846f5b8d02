package docker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// What a container fault costs on each path (docs/engineapi.md), on a node
// running the static Go probe: through the engine's API, a helper's start
// with its first change (a partition's rules; a clock's takeover of the
// patch an earlier helper made) and each later change; from this machine,
// each change (nsenter and iptables; a write into the patched process).
//
//	go test -run '^$' -bench FaultHelpers -benchtime 20x ./harness/docker
func BenchmarkFaultHelpers(b *testing.B) {
	tag := probeImage(b)
	for _, path := range []string{docker.PathAPI, docker.PathHost} {
		b.Run(path, func(b *testing.B) {
			if path == docker.PathAPI {
				dockertest.UseRemote(b)
			} else {
				b.Setenv(docker.FaultPathEnv, docker.PathHost)
			}
			ctx := context.Background()
			run := fmt.Sprintf("bench-faultpath-%d", time.Now().UnixNano())
			rt, err := docker.New(ctx, run, docker.Options{NoWatchdog: true})
			require.NoError(b, err)
			defer rt.Close(context.Background())
			nw, err := rt.Network(ctx)
			require.NoError(b, err)
			c, err := rt.Run(ctx, docker.ContainerSpec{Node: "n1", Image: tag, IP: nw.HostIP(0),
				Cmd: []string{"/goprobe", "-http", "0.0.0.0:8080"}, Ports: []int{8080}})
			require.NoError(b, err)
			eventually(b, "http://"+c.Addr(8080)+"/now", 0)
			peers := [][]string{{nw.HostIP(1)}, {nw.HostIP(1), nw.HostIP(2)}}
			// Build the images and patch the probe once, outside the timings.
			require.NoError(b, rt.Partition(ctx, "n1", peers[0]))
			require.NoError(b, rt.SetClockOffset(ctx, "n1", time.Second))
			require.Equal(b, path, rt.FaultPath("partition"))
			require.Equal(b, path, rt.FaultPath("clock"))

			if path == docker.PathAPI {
				b.Run("partition/helper-start+first-rules", func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						rt.RetireHelpers(ctx, "n1")
						b.StartTimer()
						require.NoError(b, rt.Partition(ctx, "n1", peers[i%2]))
					}
				})
			}
			b.Run("partition/change", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					require.NoError(b, rt.Partition(ctx, "n1", peers[i%2]))
				}
			})
			if path == docker.PathAPI {
				b.Run("clock/helper-start+takeover", func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						rt.RetireHelpers(ctx, "n1")
						b.StartTimer()
						require.NoError(b, rt.SetClockOffset(ctx, "n1", time.Duration(i%2+1)*time.Second))
					}
				})
			}
			b.Run("clock/change", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					require.NoError(b, rt.SetClockOffset(ctx, "n1", time.Duration(i%2+1)*time.Second))
				}
			})
			require.NoError(b, rt.HealAll(ctx))
			require.NoError(b, rt.SetClockOffset(ctx, "n1", 0))
		})
	}
}
