package sshlab

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/google/nftables"
	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/docker/dockertest"
	"github.com/fencecheck/fencecheck/nemesis/netcut"
)

// probeDir is where the hosts see the probe (bind-mounted read-only).
const probeDir = "/opt/fencecheck"

// TestLab starts two hosts (host-2 without FUSE), logs in over SSH with
// the lab's key checked against its known_hosts, refuses a host whose key
// does not match, uploads by SFTP, runs the project's fault code inside
// the hosts (sshprobe), and checks that the inspector, from this machine,
// sees a file, a stopped process, a FUSE mount and nftables tables while
// they are there, and nothing once they are gone.
func TestLab(t *testing.T) {
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildProbe(ctx, t)
	began := time.Now()
	lab, err := Start(ctx, Options{Hosts: 2, NoFUSE: []string{"host-2"}, Log: logWriter{t},
		Binds: []docker.Bind{{Host: bin, Container: probeDir}}})
	require.NoError(t, err)
	t.Logf("Start took %s", time.Since(began).Round(time.Millisecond))
	runID := lab.Runtime().RunID()
	closed := false
	defer func() {
		if !closed {
			lab.Close(context.WithoutCancel(ctx))
		}
	}()
	require.Len(t, lab.Hosts, 2)
	h1, h2 := lab.Hosts[0], lab.Hosts[1]
	assert.Equal(t, "host-1", h1.Name)
	assert.Equal(t, 22, h1.Port)
	assert.True(t, h1.FUSE)
	assert.False(t, h2.FUSE)
	assert.NotZero(t, h1.PID)
	st, err := os.Stat(lab.KeyFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the client key's mode")
	known, err := os.ReadFile(lab.KnownHosts)
	require.NoError(t, err)
	assert.Contains(t, string(known), h1.IP+" ssh-ed25519 ")

	// The key file on disk is what a client would load.
	key, err := os.ReadFile(lab.KeyFile)
	require.NoError(t, err)
	_, err = ssh.ParsePrivateKey(key)
	require.NoError(t, err)

	t.Run("a mismatching host key is refused", func(t *testing.T) {
		wrong, err := lab.WrongKnownHosts("host-1")
		require.NoError(t, err)
		_, err = lab.DialWith(ctx, "host-1", wrong)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "key mismatch")
		c, err := lab.DialWith(ctx, "host-2", wrong)
		require.NoError(t, err, "host-2 keeps its own key in that file")
		c.Close()
	})

	c1, err := lab.Dial(ctx, "host-1")
	require.NoError(t, err)
	defer c1.Close()
	assert.Equal(t, "ok\n", run(t, c1, "/bin/sh -c 'echo ok'"))

	t.Run("sftp upload seen by the inspector", func(t *testing.T) {
		sc, err := sftp.NewClient(c1)
		require.NoError(t, err)
		defer sc.Close()
		require.NoError(t, sc.MkdirAll("/tmp/fc-lab"))
		f, err := sc.Create("/tmp/fc-lab/hello")
		require.NoError(t, err)
		_, err = f.Write([]byte("hello\n"))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		assert.Equal(t, "hello\n", run(t, c1, "read x </tmp/fc-lab/hello; echo $x"))

		left, err := lab.Leftovers(ctx, "host-1", "/tmp/fc-lab")
		require.NoError(t, err)
		assert.Equal(t, []string{"/tmp/fc-lab", "/tmp/fc-lab/hello"}, left.Files)
		assert.Contains(t, left.String(), "/tmp/fc-lab/hello")
		require.NoError(t, sc.Remove("/tmp/fc-lab/hello"))
		require.NoError(t, sc.RemoveDirectory("/tmp/fc-lab"))
		left, err = lab.Leftovers(ctx, "host-1", "/tmp/fc-lab")
		require.NoError(t, err)
		assert.Empty(t, left.Files)
	})

	t.Run("a stopped process", func(t *testing.T) {
		s := startProbe(t, c1, "sleep")
		s.expect(t, "ready")
		p := findProcess(t, lab, "host-1", "sleep")
		require.NoError(t, syscall.Kill(p.PID, syscall.SIGSTOP))
		require.Eventually(t, func() bool {
			return findProcess(t, lab, "host-1", "sleep").State == "T"
		}, 5*time.Second, 50*time.Millisecond, "the inspector should see the process stopped")
		left, err := lab.Leftovers(ctx, "host-1", "")
		require.NoError(t, err)
		assert.Contains(t, left.String(), "stopped (T)")
		require.NoError(t, syscall.Kill(p.PID, syscall.SIGCONT))
		s.finish(t, "ok stdin closed")
	})

	// sshd gives a command no pty, so when its session ends it sends no
	// signal: only the command's pipes close. A process that reads no
	// stdin outlives the session (an ssh node must kill what it started).
	t.Run("a process that outlives its session", func(t *testing.T) {
		c, err := lab.Dial(ctx, "host-1")
		require.NoError(t, err)
		defer c.Close()
		s := startProbe(t, c, "hang")
		s.expect(t, "ready")
		require.NoError(t, c.Close())
		time.Sleep(time.Second)
		p := findProcess(t, lab, "host-1", "hang")
		require.NoError(t, syscall.Kill(p.PID, syscall.SIGKILL))
		require.Eventually(t, func() bool {
			left, err := lab.Leftovers(ctx, "host-1", "")
			require.NoError(t, err)
			for _, p := range left.Processes {
				if strings.Contains(p.Cmdline, "sshprobe hang") { // or its sh -c
					return false
				}
			}
			return true
		}, 5*time.Second, 50*time.Millisecond)
	})

	t.Run("an nftables table made from this machine", func(t *testing.T) {
		ns, err := os.Open("/proc/" + strconv.Itoa(h1.PID) + "/ns/net")
		require.NoError(t, err)
		defer ns.Close()
		conn, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
		require.NoError(t, err)
		table := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "fencecheck-test"})
		require.NoError(t, conn.Flush())
		left, err := lab.Leftovers(ctx, "host-1", "")
		require.NoError(t, err)
		assert.Equal(t, []string{"inet fencecheck-test"}, left.Tables)
		conn.DelTable(table)
		require.NoError(t, conn.Flush())
		left, err = lab.Leftovers(ctx, "host-1", "")
		require.NoError(t, err)
		assert.Empty(t, left.Tables)
	})

	// What a host can do itself, with the project's own fault code.
	t.Run("inside: FUSE power-loss layer", func(t *testing.T) {
		s := startProbe(t, c1, "fuse /tmp/fc-probe -hold")
		s.expect(t, "mounted /tmp/fc-probe/mnt")
		left, err := lab.Leftovers(ctx, "host-1", "/tmp/fc-probe")
		require.NoError(t, err)
		require.Len(t, left.Mounts, 1, "%s", left)
		m := left.Mounts[0]
		assert.Equal(t, Mount{Point: "/tmp/fc-probe/mnt", FSType: "fuse.fencecheck"}, Mount{Point: m.Point, FSType: m.FSType})
		assert.True(t, strings.HasPrefix(m.Source, "lazyfs:"), "the layer names its server: %q", m.Source)
		assert.Contains(t, left.Files, "/tmp/fc-probe/backing/synced")
		t.Logf("while held: %s", left)
		line := s.finish(t, "ok mounted")
		t.Logf("host-1: %s", line)
		left, err = lab.Leftovers(ctx, "host-1", "/tmp/fc-probe")
		require.NoError(t, err)
		assert.Empty(t, left.Mounts)
		assert.Empty(t, left.Files)

		c2, err := lab.Dial(ctx, "host-2")
		require.NoError(t, err)
		defer c2.Close()
		out := runFails(t, c2, probeDir+"/sshprobe fuse /tmp/fc-probe")
		assert.Contains(t, out, "no FUSE", "host-2 has no /dev/fuse")
		t.Logf("host-2: %s", strings.TrimSpace(out))
	})

	t.Run("inside: ptrace clock patch", func(t *testing.T) {
		out := run(t, c1, probeDir+"/sshprobe ptrace")
		assert.True(t, strings.HasPrefix(out, "ok "), out)
		t.Logf("host-1: %s", strings.TrimSpace(out))
	})

	t.Run("inside: nftables partition", func(t *testing.T) {
		peer := h2.Addr()
		assert.Contains(t, run(t, c1, probeDir+"/sshprobe dial "+peer), "ok connected")
		assert.Contains(t, run(t, c1, probeDir+"/sshprobe cut "+h2.IP), "ok dropping 1 peers")
		left, err := lab.Leftovers(ctx, "host-1", "")
		require.NoError(t, err)
		assert.Equal(t, []string{"ip fencecheck"}, left.Tables)
		out := runFails(t, c1, probeDir+"/sshprobe dial "+peer)
		assert.Contains(t, out, "error", "host-2 should be cut off")
		t.Logf("host-1 cut off from host-2: %s", strings.TrimSpace(out))
		assert.Contains(t, run(t, c1, probeDir+"/sshprobe cut"), "ok dropping 0 peers")
		assert.Contains(t, run(t, c1, probeDir+"/sshprobe dial "+peer), "ok connected")
	})

	// With the connection open its sshd processes are there; closed,
	// nothing is left.
	left, err := lab.Leftovers(ctx, "host-1", "/tmp/fc-lab")
	require.NoError(t, err)
	require.NotEmpty(t, left.Processes)
	for _, p := range left.Processes {
		assert.True(t, p.Session, "only sshd's connection processes should be left: %s", left)
	}
	require.NoError(t, c1.Close())
	for _, h := range lab.Hosts {
		left, err := lab.WaitLeftovers(ctx, h.Name, "/tmp/fc-lab", 10*time.Second)
		require.NoError(t, err)
		assert.True(t, left.Empty(), "%s", left)
		assert.Equal(t, h.Name+": nothing left", left.String())
	}

	dir := lab.Dir
	began = time.Now()
	require.NoError(t, lab.Close(ctx))
	closed = true
	t.Logf("Close took %s", time.Since(began).Round(time.Millisecond))
	containers, networks := dockertest.Leftovers(t, runID)
	assert.Zero(t, containers)
	assert.Zero(t, networks)
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "the lab's folder should be gone: %v", err)
}

// TestDeadClientIsNoticed cuts a host off from this machine while a
// session runs: sshd's client alive checks (ClientAliveInterval 2,
// ClientAliveCountMax 3) end the connection and its sessions, and a
// command that reads its stdin ends with them.
func TestDeadClientIsNoticed(t *testing.T) {
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := buildProbe(ctx, t)
	lab, err := Start(ctx, Options{Hosts: 1, Port: 2222, Log: logWriter{t}, Binds: []docker.Bind{{Host: bin, Container: probeDir}}})
	require.NoError(t, err)
	defer lab.Close(context.WithoutCancel(ctx))
	known, err := os.ReadFile(lab.KnownHosts)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(known), "["+lab.Hosts[0].IP+"]:2222 ssh-ed25519 "), "off port 22 a host is known as [IP]:port: %s", known)
	c, err := lab.Dial(ctx, "host-1")
	require.NoError(t, err)
	defer c.Close()
	startProbe(t, c, "sleep").expect(t, "ready")

	ns, err := os.Open("/proc/" + strconv.Itoa(lab.Hosts[0].PID) + "/ns/net")
	require.NoError(t, err)
	defer ns.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	require.NoError(t, err)
	nw, err := lab.Runtime().Network(ctx)
	require.NoError(t, err)
	gw := nw.Subnet.IP.To4()
	gateway, err := netcut.ParsePeers([]string{net.IPv4(gw[0], gw[1], gw[2], 1).String()})
	require.NoError(t, err)
	began := time.Now()
	require.NoError(t, netcut.Set(conn, gateway), "cutting the host off from this machine")
	defer netcut.Set(conn, nil)
	left, err := lab.Leftovers(ctx, "host-1", "")
	require.NoError(t, err)
	require.NotEmpty(t, left.Processes)
	require.Eventually(t, func() bool {
		left, err := lab.Leftovers(ctx, "host-1", "")
		require.NoError(t, err)
		return len(left.Processes) == 0
	}, 40*time.Second, 200*time.Millisecond, "sshd should notice the dead client and end its sessions")
	t.Logf("the dead client's connection and session were gone %s after the cut", time.Since(began).Round(100*time.Millisecond))
}

// TestAFailedStartSaysWhyAndLeavesNothing: an sshd that cannot start
// (a port out of range) fails Start at once with its log, and the lab is
// removed.
func TestAFailedStartSaysWhyAndLeavesNothing(t *testing.T) {
	dockertest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	_, err := Start(ctx, Options{Hosts: 1, Port: 70000, StartTimeout: 20 * time.Second})
	require.Error(t, err)
	assert.Less(t, time.Since(began), 15*time.Second, "an exited sshd is not waited for")
	assert.Contains(t, err.Error(), "host-1: sshd exited")
	assert.Contains(t, err.Error(), "log of host-1:")
	assert.Contains(t, err.Error(), "Bad port number", "sshd's own complaint")
	t.Log(err)
	cli, err := docker.Connect(ctx)
	require.NoError(t, err)
	defer cli.Close()
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelNode+"=host-1"), filters.Arg("label", docker.LabelProject+"=1"))})
	require.NoError(t, err)
	// Only this lab's: other packages' labs run beside it in `go test
	// ./...`; this one's sshd alone was told the impossible port.
	for _, c := range cs {
		if strings.Contains(c.Command, "-p 70000") {
			assert.NotContains(t, c.Labels[docker.LabelRun], "sshlab-", "a failed lab's container is left: %s", c.Names)
		}
	}
}

// TestUnknownNoFUSEHost is refused before anything starts.
func TestUnknownNoFUSEHost(t *testing.T) {
	_, err := Start(context.Background(), Options{Hosts: 2, NoFUSE: []string{"host-3"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"host-3"`)
}

func TestLeftoversInWords(t *testing.T) {
	l := Leftovers{Host: "host-1",
		Processes: []Process{{PID: 4100, NSPID: 7, Cmdline: "/opt/x sleep", State: "T"}, {PID: 4000, NSPID: 5, Cmdline: "sshd: root@notty", State: "S", Session: true}},
		Mounts:    []Mount{{Point: "/data", FSType: "fuse.fencecheck", Source: "lazyfs"}},
		Tables:    []string{"ip fencecheck"},
		Files:     []string{"/tmp/run"}}
	assert.False(t, l.Empty())
	assert.Equal(t, `host-1 still has 2 processes: pid 7 (4100 here) "/opt/x sleep" stopped (T); pid 5 (4000 here) "sshd: root@notty" sleeping (S), an sshd connection process; `+
		`and 1 FUSE mount: /data (fuse.fencecheck from lazyfs); and 1 nftables table: ip fencecheck; and 1 file: /tmp/run`, l.String())
	assert.Equal(t, "host-1: nothing left", Leftovers{Host: "host-1"}.String())
	assert.Equal(t, "/a b\\c", unescape(`/a\040b\134c`))
	assert.Equal(t, `/a\04`, unescape(`/a\04`))
}

// buildProbe compiles sshprobe, static, into a folder to bind-mount.
func buildProbe(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(bin, "sshprobe"), "./sshprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// run runs cmd in a session of its own and returns its output; it must
// succeed.
func run(t *testing.T, c *ssh.Client, cmd string) string {
	t.Helper()
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	require.NoError(t, err, "%s: %s", cmd, out)
	return string(out)
}

// runFails runs cmd, which must fail, and returns its output.
func runFails(t *testing.T, c *ssh.Client, cmd string) string {
	t.Helper()
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	require.Error(t, err, "%s should fail: %s", cmd, out)
	return string(out)
}

// probe is sshprobe running in a session, spoken to line by line.
type probe struct {
	s     *ssh.Session
	stdin io.WriteCloser
	lines chan string
}

func startProbe(t *testing.T, c *ssh.Client, args string) *probe {
	t.Helper()
	s, err := c.NewSession()
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	stdin, err := s.StdinPipe()
	require.NoError(t, err)
	stdout, err := s.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.Start(probeDir+"/sshprobe "+args))
	p := &probe{s: s, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p
}

// expect waits (boundedly) for a line that starts with prefix.
func (p *probe) expect(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			require.True(t, ok, "the probe ended before saying %q", prefix)
			if strings.HasPrefix(line, prefix) {
				return line
			}
			require.False(t, strings.HasPrefix(line, "error"), "the probe failed: %s", line)
		case <-timeout:
			t.Fatalf("the probe did not say %q within 30 s", prefix)
		}
	}
}

// finish closes the probe's stdin and waits for its last line.
func (p *probe) finish(t *testing.T, prefix string) string {
	t.Helper()
	require.NoError(t, p.stdin.Close())
	line := p.expect(t, prefix)
	require.NoError(t, p.s.Wait())
	return line
}

// findProcess is the host's sshprobe running command (not the "sh -c"
// sshd started it through: dash does not exec the last command).
func findProcess(t *testing.T, lab *Lab, host, command string) Process {
	t.Helper()
	left, err := lab.Leftovers(context.Background(), host, "")
	require.NoError(t, err)
	for _, p := range left.Processes {
		if strings.HasPrefix(p.Cmdline, probeDir+"/sshprobe "+command) {
			return p
		}
	}
	t.Fatalf("no sshprobe %s on %s: %s", command, host, left)
	return Process{}
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
