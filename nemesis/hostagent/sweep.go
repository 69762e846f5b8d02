package hostagent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/netcut"
)

// An agent that was itself killed (kill -9 on the host, the OOM killer)
// cannot heal: its programs die with it (their parent-death signal), but
// its layers stay mounted and dead, its table stays, its folder stays. The
// next agent on the host, of any run, sweeps what such an agent left: the
// folders beside its own whose agent is gone.

// pidFile names the agent that owns a run folder: "PID STARTTIME".
const pidFile = "agent.pid"

// runPrefix starts every run folder's name ("fencecheck-<run id>").
const runPrefix = "fencecheck-"

// claim writes the agent's pid file into its folder.
func claim(dir string) error {
	st, _, err := processStart(os.Getpid())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, pidFile), []byte(fmt.Sprintf("%d %s\n", os.Getpid(), st)), 0o644)
}

// sweepDeadAgents removes the run folders beside dir whose agent is gone:
// their dead layers detached, their nftables table deleted (when it
// exists), the folder removed. It says what it swept on log.
func sweepDeadAgents(dir string, nft *nftables.Conn, log io.Writer) error {
	siblings, err := filepath.Glob(filepath.Join(filepath.Dir(dir), runPrefix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, other := range siblings {
		if other == dir || !AgentGone(other) {
			continue
		}
		run := strings.TrimPrefix(filepath.Base(other), runPrefix)
		detached, err := lazyfs.SweepDeadUnder(other)
		errs = append(errs, err)
		table := netcut.TableOf(run)
		if nft != nil && tableExists(nft, table) {
			errs = append(errs, netcut.SetIn(nft, table, nil))
		}
		if lt := netcut.LossTableOf(run); nft != nil && tableExists(nft, lt) {
			errs = append(errs, netcut.SetLossIn(nft, lt, netcut.Loss{}))
		}
		if dt := netcut.DupTableOf(run); nft != nil && tableExists(nft, dt) {
			errs = append(errs, netcut.SetDupIn(nft, dt, netcut.Loss{}))
		}
		if dt := netcut.DelayTableOf(run); nft != nil && tableExists(nft, dt) {
			errs = append(errs, netcut.SetDelayIn(nft, dt, netcut.Delay{}))
		}
		errs = append(errs, os.RemoveAll(other))
		fmt.Fprintf(log, "fencehost: swept %s, left by an agent that was killed (%d dead layers detached, table %s removed if it was there)\n", other, len(detached), table)
	}
	return errors.Join(errs...)
}

// AgentGone says whether a run folder's agent is gone (a folder without a
// pid file is being made, or is not an agent's: left alone).
func AgentGone(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	st, state, err := processStart(pid)
	// Gone, its pid reused by another process, or a zombie (killed, its
	// parent too: nothing may reap it here).
	return err != nil || st != f[1] || state == "Z" || state == "X"
}

func tableExists(nft *nftables.Conn, name string) bool {
	tables, err := nft.ListTablesOfFamily(nftables.TableFamilyIPv4)
	return err == nil && slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == name })
}

// processStart is a process's start time in clock ticks since boot (field
// 22 of /proc/PID/stat: with the pid, it names one process for good) and
// its state (field 3).
func processStart(pid int) (start, state string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", "", err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return "", "", fmt.Errorf("/proc/%d/stat cannot be read", pid)
	}
	return f[19], f[0], nil
}
