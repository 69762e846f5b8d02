// Package sshlab is the SSH test lab: containers that play remote machines
// for the ssh node kind, each a Debian sshd (built FROM scratch from this
// machine's openssh-server, image.go) in network, PID and mount namespaces
// of its own, on a run network of their own, reached by their IPs with a
// key pair and a known_hosts file made for the lab. Its inspector
// (inspect.go) says what a run left on a host, measured from this machine
// through /proc and netlink, never through SSH: the thing under test is
// the SSH side.
//
// The lab needs a Docker engine on this machine (the hosts' IPs are routed
// here, their host keys and the binaries they get are bind-mounted, and the
// inspector reads their processes) and, for the inspector, root.
package sshlab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sync/errgroup"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// User is the account the lab's key logs in as.
const User = "root"

// Options shape a lab.
type Options struct {
	// Hosts is how many hosts to start, named host-1 .. host-N (default 1).
	Hosts int
	// Binds are folders of this machine mounted into every host, always
	// read-only (a folder of binaries at /opt/fencecheck).
	Binds []docker.Bind
	// NoFUSE names hosts that get neither /dev/fuse nor CAP_SYS_ADMIN: a
	// machine where the power-loss layer is not applicable.
	NoFUSE []string
	// Port is the port sshd listens on (default 22).
	Port int
	// StartTimeout bounds the wait for every host's sshd to complete a
	// handshake (default 30 s).
	StartTimeout time.Duration
	// Log receives progress lines (nil: discarded).
	Log io.Writer
	_   struct{}
}

// Lab is a set of running hosts and the files to reach them.
type Lab struct {
	Hosts []Host
	// KeyFile is the lab's client private key (OpenSSH format, mode 0600),
	// authorized for root on every host.
	KeyFile string
	// KnownHosts is a known_hosts file (OpenSSH format, not hashed) with
	// every host's key under its address ("IP", or "[IP]:port" off 22).
	KnownHosts string
	// Dir holds the lab's files; Close removes it. It is a run folder of
	// harness/docker, so a killed test's sweep removes it too.
	Dir string

	rt     *docker.Runtime
	signer ssh.Signer
	// baseline is each host's mounts at its start (the engine's root
	// filesystem, which is FUSE here: fuse-overlayfs), not leftovers.
	baseline map[string]map[mountKey]bool
}

// Host is one lab machine.
type Host struct {
	Name string
	IP   string
	Port int
	// PID is sshd's pid on this machine (Runtime.PID at the start).
	PID int
	// FUSE is false for a host started without /dev/fuse (Options.NoFUSE).
	FUSE bool
}

// Addr is "IP:port".
func (h Host) Addr() string { return net.JoinHostPort(h.IP, strconv.Itoa(h.Port)) }

// Capabilities every host gets on top of the engine's defaults, and why:
// fencecheck acts from inside a remote machine as it acts on its own.
var (
	// NET_ADMIN: partitions as an nftables table in the host's namespace.
	// SYS_PTRACE: clock faults patch processes by ptrace (the engine's
	// default seccomp profile allows ptrace on kernels since 4.8).
	baseCaps = []string{"NET_ADMIN", "SYS_PTRACE"}
	// SYS_ADMIN (mount(2)) with /dev/fuse: the power-loss layer. AppArmor's
	// docker-default profile would deny the mount all the same.
	fuseCaps     = []string{"SYS_ADMIN"}
	fuseDevices  = []string{"/dev/fuse"}
	fuseSecurity = []string{"apparmor=unconfined"}
)

// Start builds the host image when needed and starts the hosts, each with
// a host key of its own and the lab's client key authorized, then waits
// until each one's sshd completes an SSH handshake with that key, checked
// against KnownHosts. On failure everything started is removed again.
func Start(ctx context.Context, opts Options) (*Lab, error) {
	if opts.Hosts == 0 {
		opts.Hosts = 1
	}
	if opts.Port == 0 {
		opts.Port = 22
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	log := opts.Log
	for _, n := range opts.NoFUSE {
		if !slices.Contains(hostNames(opts.Hosts), n) {
			return nil, fmt.Errorf("sshlab: NoFUSE names %q, not one of the %d hosts", n, opts.Hosts)
		}
	}
	tags, err := docker.EnsureImages(ctx, log, ImageName)
	if err != nil {
		return nil, err
	}
	rt, err := docker.New(ctx, "sshlab-"+randomHex(6), docker.Options{Log: log})
	if err != nil {
		return nil, err
	}
	lab := &Lab{rt: rt, baseline: map[string]map[mountKey]bool{}}
	if err := lab.start(ctx, opts, tags[ImageName]); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return nil, errors.Join(err, lab.Close(cctx))
	}
	return lab, nil
}

func hostNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "host-" + strconv.Itoa(i+1)
	}
	return names
}

func (l *Lab) start(ctx context.Context, opts Options, image string) error {
	dir, err := l.rt.RunDir()
	if err != nil {
		return err
	}
	l.Dir = dir
	clientKey, signer, err := newKey("fencecheck-sshlab")
	if err != nil {
		return err
	}
	l.signer = signer
	l.KeyFile = filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(l.KeyFile, clientKey, 0o600); err != nil {
		return err
	}
	authorized := ssh.MarshalAuthorizedKey(signer.PublicKey())
	nw, err := l.rt.Network(ctx)
	if err != nil {
		return err
	}
	var binds []docker.Bind
	for _, b := range opts.Binds {
		b.ReadOnly = true
		binds = append(binds, b)
	}
	var known []string
	for i, name := range hostNames(opts.Hosts) {
		h := Host{Name: name, IP: nw.HostIP(i), Port: opts.Port, FUSE: !slices.Contains(opts.NoFUSE, name)}
		hostKey, hostSigner, err := newKey("root@" + name)
		if err != nil {
			return err
		}
		keys := filepath.Join(dir, "hosts", name)
		if err := os.MkdirAll(filepath.Join(keys, authorizedDir), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(keys, hostKeyName), hostKey, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(keys, authorizedDir, User), authorized, 0o644); err != nil {
			return err
		}
		known = append(known, knownhosts.Line([]string{h.Addr()}, hostSigner.PublicKey()))
		l.Hosts = append(l.Hosts, h)
	}
	l.KnownHosts = filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(l.KnownHosts, []byte(strings.Join(known, "\n")+"\n"), 0o644); err != nil {
		return err
	}

	started := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for i := range l.Hosts {
		h := &l.Hosts[i]
		g.Go(func() error {
			spec := docker.ContainerSpec{
				Node:   h.Name,
				Image:  image,
				Cmd:    []string{SSHD, "-D", "-e", "-f", ConfigFile, "-p", strconv.Itoa(h.Port)},
				IP:     h.IP,
				Binds:  append([]docker.Bind{{Host: filepath.Join(dir, "hosts", h.Name), Container: KeysDir, ReadOnly: true}}, binds...),
				CapAdd: baseCaps,
			}
			if h.FUSE {
				spec.CapAdd = append(slices.Clone(baseCaps), fuseCaps...)
				spec.Devices, spec.SecurityOpt = fuseDevices, fuseSecurity
			}
			if _, err := l.rt.Run(gctx, spec); err != nil {
				return err
			}
			pid, err := l.rt.PID(gctx, h.Name)
			if err != nil {
				// An sshd that cannot start may exit before its pid is read.
				if st, serr := l.rt.State(gctx, h.Name); serr == nil && !st.Running {
					return fmt.Errorf("%s: sshd exited (status %d) as it started\n%s", h.Name, st.ExitCode, l.containerLog(gctx, h.Name))
				}
				return fmt.Errorf("%s: %w\n%s", h.Name, err, l.containerLog(gctx, h.Name))
			}
			h.PID = pid
			return l.waitSSH(gctx, *h, opts.StartTimeout)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, h := range l.Hosts {
		mounts, err := l.mounts(h.PID)
		if err != nil {
			return fmt.Errorf("%s: reading its mounts: %w", h.Name, err)
		}
		l.baseline[h.Name] = map[mountKey]bool{}
		for _, m := range mounts {
			l.baseline[h.Name][m.key()] = true
		}
	}
	fmt.Fprintf(opts.Log, "sshlab: %d hosts up in %s (%s)\n", len(l.Hosts), time.Since(started).Round(time.Millisecond), l.rt.RunID())
	return nil
}

// newKey makes an ed25519 key: the private key in OpenSSH's PEM format,
// and its signer.
func newKey(comment string) ([]byte, ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, nil, err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), signer, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// waitSSH dials h until a handshake with the lab key, checked against
// KnownHosts, succeeds, or within passes (then the error carries the
// container's log). A container that exited fails at once.
func (l *Lab) waitSSH(ctx context.Context, h Host, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	for {
		c, err := l.dial(ctx, h, l.KnownHosts)
		if err == nil {
			return c.Close()
		}
		last = err
		if st, serr := l.rt.State(ctx, h.Name); serr == nil && !st.Running {
			return fmt.Errorf("%s: sshd exited (status %d) before it answered: %v\n%s", h.Name, st.ExitCode, last, l.containerLog(ctx, h.Name))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no SSH handshake at %s within %s: %v\n%s", h.Name, h.Addr(), within, last, l.containerLog(context.WithoutCancel(ctx), h.Name))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// containerLog is the host container's output, for an error message.
func (l *Lab) containerLog(ctx context.Context, name string) string {
	path := filepath.Join(l.Dir, "logs", name+".log")
	if err := l.rt.SaveLog(ctx, name, path); err != nil {
		return fmt.Sprintf("(no log of %s: %v)", name, err)
	}
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = append([]byte("..."), b[len(b)-4000:]...)
	}
	return fmt.Sprintf("log of %s:\n%s", name, b)
}

// ClientConfig logs in as root with the lab key and checks host keys
// against knownHostsFile (KnownHosts, or WrongKnownHosts').
func (l *Lab) ClientConfig(knownHostsFile string) (*ssh.ClientConfig, error) {
	check, err := knownhosts.New(knownHostsFile)
	if err != nil {
		return nil, err
	}
	return &ssh.ClientConfig{
		User:            User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(l.signer)},
		HostKeyCallback: check,
		// The lab's hosts offer ed25519 keys only; asking for them first
		// keeps knownhosts from refusing a host for an algorithm it lacks.
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
		Timeout:           5 * time.Second,
	}, nil
}

// Dial opens an SSH connection to the host named name as root, its key
// checked against KnownHosts.
func (l *Lab) Dial(ctx context.Context, name string) (*ssh.Client, error) {
	h, err := l.Host(name)
	if err != nil {
		return nil, err
	}
	return l.dial(ctx, h, l.KnownHosts)
}

// DialWith is Dial with another known_hosts file (WrongKnownHosts).
func (l *Lab) DialWith(ctx context.Context, name, knownHostsFile string) (*ssh.Client, error) {
	h, err := l.Host(name)
	if err != nil {
		return nil, err
	}
	return l.dial(ctx, h, knownHostsFile)
}

func (l *Lab) dial(ctx context.Context, h Host, knownHostsFile string) (*ssh.Client, error) {
	cfg, err := l.ClientConfig(knownHostsFile)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", h.Addr())
	if err != nil {
		return nil, err
	}
	// The handshake itself is bounded too: a host that accepts and says
	// nothing must not hold the caller past its context.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetDeadline(time.Now().Add(cfg.Timeout))
	c, chans, reqs, err := ssh.NewClientConn(conn, h.Addr(), cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// Host is the host named name.
func (l *Lab) Host(name string) (Host, error) {
	for _, h := range l.Hosts {
		if h.Name == name {
			return h, nil
		}
	}
	return Host{}, fmt.Errorf("sshlab: no host %q (the lab has %d)", name, len(l.Hosts))
}

// WrongKnownHosts writes a known_hosts file in which the host named name
// has another key than its own (the others keep theirs), and returns its
// path: a client that checks host keys must refuse that host.
func (l *Lab) WrongKnownHosts(name string) (string, error) {
	wrong, err := l.Host(name)
	if err != nil {
		return "", err
	}
	var lines []string
	for _, h := range l.Hosts {
		if h.Name == wrong.Name {
			_, other, err := newKey("not " + h.Name)
			if err != nil {
				return "", err
			}
			lines = append(lines, knownhosts.Line([]string{h.Addr()}, other.PublicKey()))
			continue
		}
		line, err := l.knownLine(h)
		if err != nil {
			return "", err
		}
		lines = append(lines, line)
	}
	path := filepath.Join(l.Dir, "known_hosts.wrong-"+name)
	return path, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// knownLine is h's line of KnownHosts.
func (l *Lab) knownLine(h Host) (string, error) {
	b, err := os.ReadFile(l.KnownHosts)
	if err != nil {
		return "", err
	}
	want := knownhosts.Normalize(h.Addr()) + " "
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, want) {
			return line, nil
		}
	}
	return "", fmt.Errorf("sshlab: %s is not in %s", h.Name, l.KnownHosts)
}

// Runtime is the lab's Docker runtime (to kill, pause or restart a host;
// a restarted host's sshd has a new pid, which Leftovers follows).
func (l *Lab) Runtime() *docker.Runtime { return l.rt }

// Close removes the hosts, their network and Dir.
func (l *Lab) Close(ctx context.Context) error {
	if l.rt == nil {
		return nil
	}
	err := l.rt.Close(ctx)
	if l.Dir != "" {
		err = errors.Join(err, os.RemoveAll(l.Dir))
	}
	l.rt = nil
	return err
}
