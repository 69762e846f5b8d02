package sshlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
)

// The inspector reads a host from this machine, the other side of SSH:
// the host's sshd is a process here, and its namespaces are reachable
// through /proc/<pid> (processes in its PID namespace, mountinfo of its
// mount namespace, its root folder, its network namespace for netlink).
// So what an ssh node claims to have cleaned up is checked by something
// that does not go through the node's own code or connection. It needs
// root and an engine on this machine, as the lab does.

// Leftovers is what a run left on one host.
type Leftovers struct {
	Host string
	// Processes are the host's processes but the listening sshd, sshd's
	// own connection processes included (Session): an SSH connection still
	// open, or closing, keeps them.
	Processes []Process
	// Mounts are FUSE mounts in the host's mount namespace that were not
	// there when the host started.
	Mounts []Mount
	// Tables are the nftables tables of the host's network namespace whose
	// names start with "fencecheck", as "family name" ("ip fencecheck").
	Tables []string
	// Files are the folder Leftovers was asked about, when it still exists,
	// and every path under it, as paths inside the host.
	Files []string
}

// Process is one process of a host.
type Process struct {
	PID   int // on this machine
	NSPID int // inside the host
	// Cmdline is the command line, its arguments joined by spaces (a
	// process that rewrote it, as sshd's children do, shows its own words).
	Cmdline string
	// State is the kernel's one-letter state: R running, S sleeping, D disk
	// wait, T stopped (SIGSTOP), t stopped by a tracer, Z zombie.
	State string
	// Session marks sshd's own per-connection processes.
	Session bool
}

// Mount is one mount in a host.
type Mount struct {
	Point, FSType, Source string
}

type mountKey struct{ point, fstype, source string }

func (m Mount) key() mountKey { return mountKey{m.Point, m.FSType, m.Source} }

// Empty reports whether nothing is left.
func (l Leftovers) Empty() bool {
	return len(l.Processes) == 0 && len(l.Mounts) == 0 && len(l.Tables) == 0 && len(l.Files) == 0
}

var stateWords = map[string]string{
	"R": "running", "S": "sleeping", "D": "in disk wait", "T": "stopped",
	"t": "stopped by a tracer", "Z": "a zombie", "X": "dead", "I": "idle",
}

// String says what is left, in words.
func (l Leftovers) String() string {
	if l.Empty() {
		return l.Host + ": nothing left"
	}
	var parts []string
	if n := len(l.Processes); n > 0 {
		ps := make([]string, n)
		for i, p := range l.Processes {
			what := ""
			if p.Session {
				what = ", an sshd connection process"
			}
			ps[i] = fmt.Sprintf("pid %d (%d here) %q %s (%s)%s", p.NSPID, p.PID, p.Cmdline, stateWords[p.State], p.State, what)
		}
		parts = append(parts, fmt.Sprintf("%s: %s", plural(n, "process", "processes"), strings.Join(ps, "; ")))
	}
	if n := len(l.Mounts); n > 0 {
		ms := make([]string, n)
		for i, m := range l.Mounts {
			ms[i] = fmt.Sprintf("%s (%s from %s)", m.Point, m.FSType, m.Source)
		}
		parts = append(parts, fmt.Sprintf("%s: %s", plural(n, "FUSE mount", "FUSE mounts"), strings.Join(ms, "; ")))
	}
	if n := len(l.Tables); n > 0 {
		parts = append(parts, fmt.Sprintf("%s: %s", plural(n, "nftables table", "nftables tables"), strings.Join(l.Tables, "; ")))
	}
	if n := len(l.Files); n > 0 {
		parts = append(parts, fmt.Sprintf("%s: %s", plural(n, "file", "files"), strings.Join(l.Files, ", ")))
	}
	return l.Host + " still has " + strings.Join(parts, "; and ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Leftovers inspects the host named name: its processes (but the listening
// sshd), its FUSE mounts, its "fencecheck*" nftables tables, and the files
// in dir, the folder inside the host where the run kept its files (the
// run's marker folder; it counts itself while it exists; "" skips files).
func (l *Lab) Leftovers(ctx context.Context, name, dir string) (Leftovers, error) {
	out := Leftovers{Host: name}
	if _, err := l.Host(name); err != nil {
		return out, err
	}
	// The pid now, not Host.PID: a restarted host has a new sshd.
	pid, err := l.rt.PID(ctx, name)
	if err != nil {
		return out, err
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil {
		return out, fmt.Errorf("sshlab: %s's sshd (pid %d) is not visible here: the inspector needs the engine on this machine: %w", name, pid, err)
	}
	var errs []error
	if out.Processes, err = processes(pid); err != nil {
		errs = append(errs, fmt.Errorf("processes: %w", err))
	}
	mounts, err := l.mounts(pid)
	if err != nil {
		errs = append(errs, fmt.Errorf("mounts: %w", err))
	}
	for _, m := range mounts {
		if !l.baseline[name][m.key()] {
			out.Mounts = append(out.Mounts, m)
		}
	}
	if out.Tables, err = tables(pid); err != nil {
		errs = append(errs, fmt.Errorf("nftables: %w", err))
	}
	if dir != "" {
		if out.Files, err = files(pid, dir); err != nil {
			errs = append(errs, fmt.Errorf("files under %s: %w", dir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("sshlab: inspecting %s: %w", name, err)
	}
	return out, nil
}

// WaitLeftovers inspects the host until nothing is left or within has
// passed, and returns the last inspection: a closed SSH connection's
// processes and what its sessions' hang-up ends go away a moment later.
func (l *Lab) WaitLeftovers(ctx context.Context, name, dir string, within time.Duration) (Leftovers, error) {
	deadline := time.Now().Add(within)
	for {
		left, err := l.Leftovers(ctx, name, dir)
		if err != nil || left.Empty() || time.Now().After(deadline) {
			return left, err
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// processes lists every process in the PID namespace of sshd (pid), but
// sshd itself, by the namespace's inode: /proc/<p>/ns/pid names it for
// every process here.
func processes(sshd int) ([]Process, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", sshd))
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sshd {
			continue
		}
		// A process that exits between the listing and these reads is
		// simply not there any more.
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || link != ns {
			continue
		}
		p, err := readProcess(pid)
		if err != nil {
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NSPID < out[j].NSPID })
	return out, nil
}

func readProcess(pid int) (Process, error) {
	p := Process{PID: pid}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) {
		p.State = string(stat[i+2])
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return p, err
	}
	p.Cmdline = strings.TrimSpace(string(bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte{' '})))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				p.NSPID, _ = strconv.Atoi(f[len(f)-1]) // the innermost namespace's
			}
		}
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		p.Session = path.Base(strings.TrimSuffix(exe, " (deleted)")) == path.Base(SSHD)
	}
	return p, nil
}

// mounts lists the FUSE mounts of pid's mount namespace.
func (l *Lab) mounts(pid int) ([]Mount, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, err
	}
	var out []Mount
	for _, line := range strings.Split(string(b), "\n") {
		// "id parent major:minor root point options [tags...] - fstype source superoptions"
		before, after, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(before), strings.Fields(after)
		if len(f) < 5 || len(g) < 2 {
			continue
		}
		if g[0] != "fuse" && g[0] != "fuseblk" && !strings.HasPrefix(g[0], "fuse.") {
			continue
		}
		out = append(out, Mount{Point: unescape(f[4]), FSType: g[0], Source: unescape(g[1])})
	}
	return out, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var familyNames = map[nftables.TableFamily]string{
	nftables.TableFamilyINet: "inet", nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6",
	nftables.TableFamilyARP: "arp", nftables.TableFamilyNetdev: "netdev", nftables.TableFamilyBridge: "bridge",
}

// tables lists the "fencecheck*" nftables tables of pid's network
// namespace, over netlink from this process (no nft binary, no entering).
func tables(pid int) ([]string, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return nil, err
	}
	ts, err := conn.ListTables()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range ts {
		if strings.HasPrefix(t.Name, "fencecheck") {
			fam := familyNames[t.Family]
			if fam == "" {
				fam = fmt.Sprintf("family-%d", t.Family)
			}
			out = append(out, fam+" "+t.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// files lists dir (inside the host) and everything under it, through
// /proc/<pid>/root: the host's own root, whatever mounts it has. Symbolic
// links are listed, never followed (one could point anywhere here).
func files(pid int, dir string) ([]string, error) {
	if !path.IsAbs(dir) {
		return nil, fmt.Errorf("%q is not an absolute path inside the host", dir)
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	top := filepath.Join(root, path.Clean(dir))
	var out []string
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == top && errors.Is(err, fs.ErrNotExist) {
				return nil // gone: nothing left
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, "/"+filepath.ToSlash(rel))
		return nil
	})
	return out, err
}
