// Package dockertest lets Docker-backed tests demand Docker in CI and skip
// only on a developer's machine without it.
package dockertest

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// Required reports whether Docker tests must fail, not skip, when Docker is
// unreachable: in CI (CI=true) and when FENCECHECK_REQUIRE_DOCKER=1.
func Required() bool { return docker.TestsRequired() }

// Require stops the test when Docker is unreachable: a failure when
// Required, a skip otherwise.
func Require(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cli, err := docker.Connect(ctx)
	if err == nil {
		cli.Close()
		return
	}
	if Required() {
		t.Fatalf("Docker is required here (CI=true or FENCECHECK_REQUIRE_DOCKER=1) but unreachable: %v", err)
	}
	t.Skipf("Docker unreachable, skipping (set FENCECHECK_REQUIRE_DOCKER=1 to make this a failure): %v", err)
}

// Leftovers counts the containers and networks of run runID still in
// Docker: after a target's Stop (or a watchdog's sweep) both must be 0.
func Leftovers(t testing.TB, runID string) (containers, networks int) {
	t.Helper()
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	if err != nil {
		t.Fatalf("counting leftovers: %v", err)
	}
	defer cli.Close()
	f := filters.NewArgs(filters.Arg("label", docker.LabelRun+"="+runID))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatalf("listing networks: %v", err)
	}
	return len(cs), len(ns)
}
