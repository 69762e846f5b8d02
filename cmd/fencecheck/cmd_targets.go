package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencecheck/fencecheck/analysis"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/targets"
	"github.com/fencecheck/fencecheck/targets/memory"
	"github.com/fencecheck/fencecheck/workloads"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "targets",
		Short: "List the built-in targets, the nemeses, the checkers, the workload profiles and the reference's bug switches",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintln(w, "targets:")
			for _, n := range targets.Names() {
				fmt.Fprintf(w, "  %-16s %s\n", n, targets.Describe(n))
			}
			fmt.Fprintf(w, "  %-16s %s\n", "spec:FILE", "any system that speaks Fencing API v1, described by a spec file (docs/spec.md)")
			fmt.Fprintln(w, "nemeses (--nemesis a,b or all):")
			fmt.Fprintf(w, "  %s\n", strings.Join(nemesis.Names(), ", "))
			fmt.Fprintln(w, "checkers beside the direct checks (--checker a,b):")
			fmt.Fprintf(w, "  %s\n", analysis.CheckerChoices())
			fmt.Fprintln(w, "workload profiles (--profile a,b or all: each writer one, the mix drawn from --seed):")
			for _, p := range workloads.Profiles {
				fmt.Fprintf(w, "  %-16s %s\n  %-16s for: %s\n", p.Name, p.Shape, "", p.For)
			}
			var bugs []string
			for _, b := range memory.AllBugs() {
				bugs = append(bugs, string(b))
			}
			fmt.Fprintln(w, "bug switches of the memory reference (--bug):")
			fmt.Fprintf(w, "  %s\n", strings.Join(bugs, ", "))
			return nil
		},
	})
}
