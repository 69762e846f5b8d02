package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/sweep"
)

var (
	cleanRun    string
	cleanImages bool
	cleanAll    bool
	cleanStore  string
	// cleanNoDocker: only what needs no engine (CI's sweep before and
	// after the tests on a machine whose engine may be down).
	cleanNoDocker bool
)

var cleanCmd = &cobra.Command{
	Use:   "clean",
	Short: "Remove the containers and networks that dead fencecheck runs left behind",
	Long: `Remove the Docker containers, networks and run directories labelled
fencecheck=1 whose run's harness is gone (killed, crashed: its pid is no longer
that process), and print what was removed. Runs in progress are kept and
listed: removing a live run's containers would make it fail. Only the objects
of one run with --run. --all removes every run's objects, live ones too (with
a warning). Nothing unlabelled is touched. Images are kept (they are a cache)
unless --images is given. Power-loss layers (FUSE mounts of fencecheck's own)
left dead by a killed run are detached first, and the run directories that
held them removed; live ones are never touched. Every test, shrink and conform
makes the same sweep (without Docker) at its start; --no-docker does only that.`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, args []string) error {
		// Before Docker: a dead mount needs no engine, and a machine
		// without one may have them too. The same sweep every run makes at
		// its start (harness/sweep), plus the run folders that held a dead
		// layer even when an earlier removal took their owner file.
		swept, err := sweep.Leftovers(cleanStore)
		for _, l := range swept.Lines() {
			fmt.Println(l)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "fencecheck: warning: %v\n", err)
		}
		mounts := swept.Mounts
		dirs, err := docker.SweepRunDirsHolding(mounts)
		for _, r := range dirs {
			fmt.Println("removed", r)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "fencecheck: warning: %v\n", err)
		}
		if cleanNoDocker {
			if swept.Empty() && len(dirs) == 0 {
				fmt.Println("nothing to remove")
			}
			return nil
		}
		cli, err := docker.Connect(cmd.Context())
		if err != nil {
			return exitWith(analysis.ExitCannot, err)
		}
		defer cli.Close()
		live, err := docker.LiveRuns(cmd.Context(), cli)
		if err != nil {
			return exitWith(analysis.ExitCannot, err)
		}
		var removed []docker.Removed
		switch {
		case cleanAll:
			if cleanRun != "" {
				live = map[string]string{cleanRun: live[cleanRun]}
				if live[cleanRun] == "" {
					delete(live, cleanRun)
				}
			}
			if len(live) > 0 {
				fmt.Fprintf(os.Stderr, "fencecheck: warning: --all removes %d live run(s) too: %s; they will fail\n", len(live), describeRuns(live))
			}
			removed, err = docker.Sweep(cmd.Context(), cli, cleanRun)
		case cleanRun != "" && live[cleanRun] != "":
			fmt.Printf("kept run %s: its harness (pid %s) is running; stop it, or use --all to remove it anyway\n", cleanRun, live[cleanRun])
		case cleanRun != "":
			removed, err = docker.Sweep(cmd.Context(), cli, cleanRun)
		default:
			removed, err = docker.SweepOrphans(cmd.Context(), cli)
			if len(live) > 0 {
				fmt.Printf("kept %d live run(s): %s (--all removes them too)\n", len(live), describeRuns(live))
			}
		}
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
		if len(removed) == 0 && swept.Empty() && len(dirs) == 0 {
			fmt.Println("nothing to remove")
		}
		return nil
	},
}

// describeRuns lists runs with their harness's pid.
func describeRuns(runs map[string]string) string {
	var out []string
	for run, pid := range runs {
		out = append(out, fmt.Sprintf("%s (pid %s)", run, pid))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
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
	cleanCmd.Flags().BoolVar(&cleanAll, "all", false, "remove the objects of live runs too (they will fail)")
	cleanCmd.Flags().StringVar(&cleanStore, "store", "store", "run store whose dead runs' layer folders are removed (their evidence stays)")
	cleanCmd.Flags().BoolVar(&cleanNoDocker, "no-docker", false, "sweep only what needs no Docker engine (dead layers, dead runs' folders)")
	watchdogCmd.Flags().StringVar(&watchdogRun, "run", "", "run id whose objects to sweep")
	watchdogCmd.Flags().IntVar(&watchdogParent, "parent", 0, "sweep as soon as this process is gone (0: wait for stdin to close)")
	rootCmd.AddCommand(cleanCmd, watchdogCmd)
}
