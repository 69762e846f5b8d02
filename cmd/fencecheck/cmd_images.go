package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/harness/docker"
)

var imagesCmd = &cobra.Command{
	Use:   "images [NAME...]",
	Short: "Build the container images (" + strings.Join(docker.KnownImages(), ", ") + ")",
	Long: `Build the project's container images FROM scratch (nothing is pulled: no
registry is needed). An image whose content is unchanged is not built again;
the first build of etcd compiles its server (about a minute on two cores).
Container targets build what they need on their first run anyway.

Known images: ` + strings.Join(docker.KnownImages(), ", ") + `; etcd@VERSION
builds etcd at a release the Go module proxy serves (etcd@v3.5.0).`,
	RunE: func(cmd *cobra.Command, args []string) error {
		for _, name := range args {
			if !isKnownImage(name) {
				return usageErrorf("unknown image %q (known: %s)", name, strings.Join(docker.KnownImages(), ", "))
			}
		}
		start := time.Now()
		tags, err := docker.EnsureImages(cmd.Context(), os.Stdout, args...)
		if err != nil {
			return exitWith(analysis.ExitCannot, err)
		}
		fmt.Printf("%d images ready in %.1fs\n", len(tags), time.Since(start).Seconds())
		return nil
	},
}

func isKnownImage(name string) bool {
	if v, ok := strings.CutPrefix(name, docker.ImageEtcd+"@"); ok && v != "" {
		return true
	}
	for _, k := range docker.KnownImages() {
		if k == name {
			return true
		}
	}
	return false
}

func init() { rootCmd.AddCommand(imagesCmd) }
