package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/harness/docker"
)

var (
	cleanRun    string
	cleanImages bool
)

var cleanCmd = &cobra.Command{
	Use:   "clean",
	Short: "Remove every container and network fencecheck left behind",
	Long: `Remove every Docker container and network labelled fencecheck=1 (only those
of one run with --run), and print what was removed. Nothing unlabelled is
touched. Images are kept (they are a cache) unless --images is given.`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, args []string) error {
		cli, err := docker.Connect(cmd.Context())
		if err != nil {
			return exitWith(analysis.ExitCannot, err)
		}
		defer cli.Close()
		removed, err := docker.Sweep(cmd.Context(), cli, cleanRun)
		if err == nil && cleanImages {
			var images []docker.Removed
			images, err = docker.RemoveImages(cmd.Context(), cli)
			removed = append(removed, images...)
		}
		for _, r := range removed {
			fmt.Println("removed", r)
		}
		if err != nil {
			return exitWith(analysis.ExitCannot, err)
		}
		if len(removed) == 0 {
			fmt.Println("nothing to remove")
		}
		return nil
	},
}

// watchdogCmd is what a harness's watchdog does, runnable by hand: wait
// until stdin closes or the parent process is gone, then sweep the run.
var (
	watchdogRun    string
	watchdogParent int
)

var watchdogCmd = &cobra.Command{
	Use:    "watchdog --run ID [--parent PID]",
	Short:  "Sweep a run's containers and network once its harness is gone",
	Hidden: true,
	Args:   cobra.NoArgs,
	RunE: func(cmd *cobra.Command, args []string) error {
		if watchdogRun == "" {
			return usageErrorf("watchdog needs --run")
		}
		if err := docker.Watchdog(cmd.Context(), watchdogRun, watchdogParent, os.Stdin); err != nil {
			return exitWith(analysis.ExitCannot, err)
		}
		return nil
	},
}

func init() {
	cleanCmd.Flags().StringVar(&cleanRun, "run", "", "remove only the objects of this run id")
	cleanCmd.Flags().BoolVar(&cleanImages, "images", false, "also remove the project's images (rebuilt on the next run)")
	watchdogCmd.Flags().StringVar(&watchdogRun, "run", "", "run id whose objects to sweep")
	watchdogCmd.Flags().IntVar(&watchdogParent, "parent", 0, "sweep as soon as this process is gone (0: wait for stdin to close)")
	rootCmd.AddCommand(cleanCmd, watchdogCmd)
}
