package docker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
)

// A new build removes the repository's older images, not the one it keeps.
func TestPruneSuperseded(t *testing.T) {
	dockertest.Require(t)
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	repo := fmt.Sprintf("fencecheck/test-prune-%d", time.Now().UnixNano())
	build := func(content string) string {
		tag, built, err := docker.BuildImage(ctx, cli, docker.ImageSpec{Repository: repo, Dockerfile: "FROM scratch\nCOPY f /\n",
			Files: []docker.File{{Name: "f", Mode: 0o644, Data: []byte(content)}}}, nil)
		require.NoError(t, err)
		require.True(t, built)
		return tag
	}
	old, keep := build("old"), build("new")
	defer cli.ImageRemove(ctx, keep, image.RemoveOptions{Force: true})
	list := func() []string {
		imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", repo))})
		require.NoError(t, err)
		var tags []string
		for _, img := range imgs {
			tags = append(tags, img.RepoTags...)
		}
		return tags
	}
	docker.PruneSuperseded(ctx, cli, repo, keep, time.Hour)
	assert.ElementsMatch(t, []string{old, keep}, list(), "images younger than the limit stay")
	docker.PruneSuperseded(ctx, cli, repo, keep, 0)
	assert.Equal(t, []string{keep}, list())
}
