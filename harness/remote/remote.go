// Package remote reaches a host over SSH (golang.org/x/crypto/ssh, with the
// conventions a user's own ssh has: ~/.ssh/config, an ssh-agent, the usual
// key files, known_hosts) and copies files there by SFTP. Host keys are
// verified by default; skipping that is an explicit option that is said
// loudly, for throw-away labs.
package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Target says how to reach a host. Empty fields are taken from
// ~/.ssh/config (Host blocks matching Host), then the defaults: port 22,
// the local user, the ssh-agent's keys and ~/.ssh/id_{ed25519,ecdsa,rsa},
// ~/.ssh/known_hosts.
type Target struct {
	Host string
	Port int
	User string
	// Key is a private key file (unencrypted; an encrypted one belongs in
	// the ssh-agent).
	Key string
	// KnownHosts are known_hosts files.
	KnownHosts []string
	// InsecureIgnoreHostKey accepts any host key: a man in the middle
	// would go unnoticed.
	InsecureIgnoreHostKey bool
	// ConfigFile is the ssh config read ("" : ~/.ssh/config; "none": none).
	ConfigFile string
}

// Conn is one SSH connection to a host.
type Conn struct {
	Addr string // host:port as dialled
	User string
	// Insecure says the host's key was not verified.
	Insecure bool
	client   *ssh.Client
}

// DialTimeout bounds the connection and the handshake.
const DialTimeout = 15 * time.Second

// Resolved is where a target leads once ~/.ssh/config and the defaults
// are applied: one host is one Resolved, however a spec spells it.
type Resolved struct {
	Host string
	Port int
	User string
	cfg  sshConfig
}

// Key names the account on the host: "user@host:port".
func (r Resolved) Key() string {
	return fmt.Sprintf("%s@%s", r.User, net.JoinHostPort(r.Host, strconv.Itoa(r.Port)))
}

// Resolve applies ~/.ssh/config and the defaults, without connecting.
func Resolve(t Target) (Resolved, error) {
	cfgFile := t.ConfigFile
	if cfgFile == "" {
		cfgFile = expandHome("~/.ssh/config")
	}
	var cfg sshConfig
	if cfgFile != "none" {
		var err error
		if cfg, err = readSSHConfig(cfgFile, t.Host); err != nil {
			return Resolved{}, fmt.Errorf("reading %s: %w", cfgFile, err)
		}
	}
	r := Resolved{Host: t.Host, Port: t.Port, User: t.User, cfg: cfg}
	if cfg.HostName != "" {
		r.Host = cfg.HostName
	}
	if r.Port == 0 && cfg.Port != "" {
		r.Port, _ = strconv.Atoi(cfg.Port)
	}
	if r.Port == 0 {
		r.Port = 22
	}
	if r.User == "" {
		r.User = cfg.User
	}
	if r.User == "" {
		if u, err := user.Current(); err == nil {
			r.User = u.Username
		}
	}
	return r, nil
}

// Dial connects and authenticates.
func Dial(ctx context.Context, t Target) (*Conn, error) {
	r, err := Resolve(t)
	if err != nil {
		return nil, err
	}
	host, port, usr, cfg := r.Host, r.Port, r.User, r.cfg
	auth, closeAgent, err := authMethods(t.Key, cfg.IdentityFiles)
	if err != nil {
		return nil, err
	}
	defer closeAgent()
	hostKey, err := hostKeyCallback(t, cfg)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	d := net.Dialer{Timeout: DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ssh %s@%s: %w", usr, addr, err)
	}
	_ = nc.SetDeadline(time.Now().Add(DialTimeout))
	cc, chans, reqs, err := ssh.NewClientConn(nc, addr, &ssh.ClientConfig{User: usr, Auth: auth, HostKeyCallback: hostKey, Timeout: DialTimeout})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("ssh %s@%s: %w", usr, addr, explain(err))
	}
	_ = nc.SetDeadline(time.Time{})
	c := &Conn{Addr: addr, User: usr, Insecure: t.InsecureIgnoreHostKey, client: ssh.NewClient(cc, chans, reqs)}
	go c.keepAlive()
	return c, nil
}

// keepAlive notices a dead link (the host's agent notices by its lease).
func (c *Conn) keepAlive() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for range t.C {
		if _, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil); err != nil {
			return
		}
	}
}

// explain turns the library's host key errors into what a user must do.
func explain(err error) error {
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) {
		if len(ke.Want) == 0 {
			return fmt.Errorf("the host's key is not in known_hosts (add it, e.g. with ssh-keyscan after checking it out of band): %w", err)
		}
		return fmt.Errorf("the host's key does NOT match known_hosts (%s:%d): someone may be in the middle, or the host was re-installed: %w", ke.Want[0].Filename, ke.Want[0].Line, err)
	}
	return err
}

func authMethods(key string, configured []string) ([]ssh.AuthMethod, func(), error) {
	var signers []ssh.Signer
	closeAgent := func() {}
	files := configured
	if key != "" {
		files = []string{key}
	}
	explicit := key != ""
	if !explicit && len(files) == 0 {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			files = append(files, expandHome("~/.ssh/"+n))
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if explicit {
				return nil, closeAgent, fmt.Errorf("ssh key %s: %w", f, err)
			}
			continue
		}
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			if explicit {
				return nil, closeAgent, fmt.Errorf("ssh key %s: %w (an encrypted key belongs in the ssh-agent)", f, err)
			}
			continue
		}
		signers = append(signers, s)
	}
	var methods []ssh.AuthMethod
	if len(signers) > 0 {
		methods = append(methods, ssh.PublicKeys(signers...))
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" && !explicit {
		if ac, err := net.Dial("unix", sock); err == nil {
			methods = append(methods, ssh.PublicKeysCallback(agent.NewClient(ac).Signers))
			closeAgent = func() { ac.Close() }
		}
	}
	if len(methods) == 0 {
		return nil, closeAgent, errors.New("no SSH key: give one (key), load one into the ssh-agent, or keep one in ~/.ssh")
	}
	return methods, closeAgent, nil
}

func hostKeyCallback(t Target, cfg sshConfig) (ssh.HostKeyCallback, error) {
	if t.InsecureIgnoreHostKey {
		return ssh.InsecureIgnoreHostKey(), nil
	}
	files := t.KnownHosts
	if len(files) == 0 {
		files = cfg.KnownHosts
	}
	if len(files) == 0 {
		files = []string{expandHome("~/.ssh/known_hosts")}
	}
	var present []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			present = append(present, f)
		}
	}
	if len(present) == 0 {
		return nil, fmt.Errorf("no known_hosts file (%s): the host's key cannot be verified (add the key, or for a throw-away lab say insecure_ignore_host_key)", strings.Join(files, ", "))
	}
	return knownhosts.New(present...)
}

// Close closes the connection: a host agent whose input it was sees its
// end and heals on its own.
func (c *Conn) Close() error { return c.client.Close() }

// Session is a command running on the host, its stdin and stdout piped.
type Session struct {
	Stdin  io.WriteCloser
	Stdout io.Reader
	s      *ssh.Session
}

// Start runs argv on the host (sshd hands it to the login shell, so each
// word is quoted).
func (c *Conn) Start(argv []string, stderr io.Writer) (*Session, error) {
	s, err := c.client.NewSession()
	if err != nil {
		return nil, err
	}
	in, err := s.StdinPipe()
	if err != nil {
		s.Close()
		return nil, err
	}
	out, err := s.StdoutPipe()
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Stderr = stderr
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	if err := s.Start(strings.Join(q, " ")); err != nil {
		s.Close()
		return nil, err
	}
	return &Session{Stdin: in, Stdout: out, s: s}, nil
}

// Wait waits for the command to exit.
func (s *Session) Wait() error { return s.s.Wait() }

// Close ends the session.
func (s *Session) Close() error { return s.s.Close() }

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Upload copies a local file to path on the host with mode, through a
// temporary name and a rename, so that a half-copied helper never runs.
func (c *Conn) Upload(local, path string, mode os.FileMode) error {
	sc, err := sftp.NewClient(c.client)
	if err != nil {
		return fmt.Errorf("sftp to %s: %w", c.Addr, err)
	}
	defer sc.Close()
	if err := sc.MkdirAll(filepath.Dir(path)); err != nil {
		return fmt.Errorf("sftp mkdir %s: %w", filepath.Dir(path), err)
	}
	src, err := os.Open(local)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := path + ".part"
	dst, err := sc.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("sftp create %s: %w", tmp, err)
	}
	if _, err := dst.ReadFrom(src); err != nil {
		dst.Close()
		return fmt.Errorf("sftp write %s: %w", tmp, err)
	}
	if err := dst.Close(); err != nil {
		return err
	}
	if err := sc.Chmod(tmp, mode); err != nil {
		return err
	}
	return sc.PosixRename(tmp, path)
}

// Fetch copies a file of the host into local (a missing remote file is
// os.ErrNotExist).
func (c *Conn) Fetch(path, local string) error {
	sc, err := sftp.NewClient(c.client)
	if err != nil {
		return fmt.Errorf("sftp to %s: %w", c.Addr, err)
	}
	defer sc.Close()
	src, err := sc.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(local)
	if err != nil {
		return err
	}
	if _, err := src.WriteTo(dst); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// Arch is the host's machine, read from the ELF header of its /bin/sh (no
// command runs for it): "amd64", "arm64", or an error naming what it is.
func (c *Conn) Arch() (string, error) {
	sc, err := sftp.NewClient(c.client)
	if err != nil {
		return "", fmt.Errorf("sftp to %s: %w", c.Addr, err)
	}
	defer sc.Close()
	f, err := sc.Open("/bin/sh")
	if err != nil {
		return "", fmt.Errorf("reading /bin/sh's header: %w", err)
	}
	defer f.Close()
	hdr := make([]byte, 20)
	if _, err := io.ReadFull(f, hdr); err != nil || string(hdr[:4]) != "\x7fELF" {
		return "", fmt.Errorf("/bin/sh on %s is not an ELF program: not a Linux host", c.Addr)
	}
	switch m := uint16(hdr[18]) | uint16(hdr[19])<<8; m {
	case 62:
		return "amd64", nil
	case 183:
		return "arm64", nil
	default:
		return "", fmt.Errorf("the host's machine (ELF %d) is not one fencecheck's helper is built for (amd64, arm64)", m)
	}
}
