package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// Fault helpers reach a node's container through the engine's API alone,
// where this machine cannot enter the container's namespaces itself
// (Docker Desktop's VM, a rootless or remote engine; see faultpath.go). A
// helper is one of the project's own programs in a scratch image, in a
// container that joins one namespace of the node's container with the one
// capability it needs and no other, spoken to by line over its attached
// stdin and stdout: cmd/netcut in the network namespace with CAP_NET_ADMIN
// (partitions), cmd/timewarp in the PID namespace with CAP_SYS_PTRACE
// (clocks). Never --privileged; the node's own container gets nothing.
//
// A helper lives as long as the namespace it joined: a restart gives the
// node new namespaces (the PID-namespace helper is killed with the old
// one), so the next change starts a new helper and gives it the state the
// runtime holds (the peers cut, the clock offset). A helper that broke (an
// error, no answer) is replaced the same way. At the end of its input (the
// harness died) a helper heals what it did and exits; the run's sweep
// removes it like every container labelled with the run.

// helperKind is one kind of fault helper.
type helperKind struct {
	image string   // an image name of knownImages
	cmd   []string // the helper's command line
	cap   string   // the one capability it keeps
	// join returns the host config that puts it into the node's namespace.
	join func(target string) container.HostConfig
}

var helperKinds = map[string]helperKind{
	ImageNetcut: {image: ImageNetcut, cmd: []string{"/netcut", "serve"}, cap: "NET_ADMIN",
		join: func(target string) container.HostConfig {
			return container.HostConfig{NetworkMode: container.NetworkMode("container:" + target)}
		}},
	ImageTimewarp: {image: ImageTimewarp, cmd: []string{"/timewarp", "serve"}, cap: "SYS_PTRACE",
		join: func(target string) container.HostConfig {
			return container.HostConfig{PidMode: container.PidMode("container:" + target), NetworkMode: "none"}
		}},
}

// LabelHelper marks a fault helper container with its kind ("netcut",
// "timewarp"); it carries the run's labels too, so sweeps remove it.
const LabelHelper = "fencecheck.helper"

// helperAnswerTimeout bounds one command's answer: a first clock patch
// takes milliseconds, a rule change less.
const helperAnswerTimeout = 10 * time.Second

// helper is one running fault helper.
type helper struct {
	kind, node string
	id, name   string
	// target and started identify the namespace joined: the node's
	// container and its State.StartedAt at the time.
	target, started string

	mu     sync.Mutex  // one command at a time
	broken atomic.Bool // a command failed: the next change starts a new helper
	att    types.HijackedResponse
	lines  chan string // answer lines; closed when the helper's output ends
	stderr *lockedBuffer
}

// helperFor returns node's live helper of kind for the namespace its
// container runs in now (started is its State.StartedAt), starting one
// (and retiring a stale one) when needed.
func (r *Runtime) helperFor(ctx context.Context, kind, node string, c *Container, started string) (*helper, error) {
	key := kind + "\x00" + node
	// One start at a time per node and kind: two helpers in one namespace
	// would undo each other.
	defer r.lockKey(&r.helperStarts, key)()
	r.mu.Lock()
	h := r.helpers[key]
	if h != nil && (h.target != c.ID || h.started != started || h.isBroken()) {
		delete(r.helpers, key)
		go h.close(context.WithoutCancel(ctx), r)
		h = nil
	}
	r.mu.Unlock()
	if h != nil {
		return h, nil
	}
	h, err := r.startHelper(ctx, kind, node, c, started)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.helpers == nil {
		r.helpers = map[string]*helper{}
	}
	if old := r.helpers[key]; old != nil {
		go old.close(context.WithoutCancel(ctx), r)
	}
	r.helpers[key] = h
	r.mu.Unlock()
	return h, nil
}

// joined reports whether a helper of kind joined the namespace node's
// container runs in now (started is its State.StartedAt), even one that
// broke since: what it did there may still be in force.
func (r *Runtime) joined(kind, node string, c *Container, started string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.helpers[kind+"\x00"+node]
	return h != nil && h.target == c.ID && h.started == started
}

// retireHelpers ends node's helpers (its container stopped or is gone: the
// namespaces they joined are gone or going).
func (r *Runtime) retireHelpers(ctx context.Context, node string) {
	r.mu.Lock()
	var old []*helper
	for key, h := range r.helpers {
		if h.node == node {
			old = append(old, h)
			delete(r.helpers, key)
		}
	}
	r.mu.Unlock()
	for _, h := range old {
		go h.close(context.WithoutCancel(ctx), r)
	}
}

// helperImage builds (once per runtime) the image of a helper kind.
func (r *Runtime) helperImage(ctx context.Context, image string) (string, error) {
	r.mu.Lock()
	tag := r.helperTags[image]
	r.mu.Unlock()
	if tag != "" {
		return tag, nil
	}
	tags, err := EnsureImages(ctx, r.log, image)
	if err != nil {
		return "", fmt.Errorf("building the fault helper image: %w", err)
	}
	r.mu.Lock()
	if r.helperTags == nil {
		r.helperTags = map[string]string{}
	}
	r.helperTags[image] = tags[image]
	r.mu.Unlock()
	return tags[image], nil
}

func (r *Runtime) startHelper(ctx context.Context, kind, node string, c *Container, started string) (*helper, error) {
	hk, ok := helperKinds[kind]
	if !ok {
		return nil, fmt.Errorf("no fault helper %q", kind)
	}
	tag, err := r.helperImage(ctx, hk.image)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.helperSeq++
	name := fmt.Sprintf("%s-%s-%d", r.containerName(node), kind, r.helperSeq)
	r.mu.Unlock()
	hc := hk.join(c.ID)
	hc.CapDrop = []string{"ALL"}
	hc.CapAdd = []string{hk.cap}
	hc.ReadonlyRootfs = true
	hc.AutoRemove = true
	created, err := r.cli.ContainerCreate(ctx,
		&container.Config{Image: tag, Cmd: hk.cmd, User: "0:0",
			OpenStdin: true, StdinOnce: true, AttachStdin: true, AttachStdout: true, AttachStderr: true,
			Labels: r.labels(map[string]string{LabelNode: node, LabelHelper: kind})},
		&hc, nil, nil, name)
	if err != nil {
		return nil, fmt.Errorf("creating the %s helper of %s: %w", kind, node, wrapUnavailable(err))
	}
	h := &helper{kind: kind, node: node, id: created.ID, name: name, target: c.ID, started: started,
		lines: make(chan string, 16), stderr: &lockedBuffer{}}
	fail := func(err error) (*helper, error) {
		r.cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
		return nil, err
	}
	// Attached before it starts, so that no answer is lost.
	h.att, err = r.cli.ContainerAttach(ctx, created.ID, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return fail(fmt.Errorf("attaching to the %s helper of %s: %w", kind, node, wrapUnavailable(err)))
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, h.stderr, h.att.Reader)
		pw.CloseWithError(err)
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	if err := r.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		h.att.Close()
		return fail(fmt.Errorf("starting the %s helper of %s: %w", kind, node, wrapUnavailable(err)))
	}
	return h, nil
}

// ask sends one command and returns the answer after "ok" (an "error"
// answer, a helper that died or one that does not answer in time is an
// error).
func (h *helper) ask(ctx context.Context, cmd string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := io.WriteString(h.att.Conn, cmd+"\n"); err != nil {
		return "", h.failed(fmt.Errorf("sending %q: %w", cmd, err))
	}
	timer := time.NewTimer(helperAnswerTimeout)
	defer timer.Stop()
	select {
	case line, ok := <-h.lines:
		if !ok {
			return "", h.failed(fmt.Errorf("it exited before answering %q", cmd))
		}
		if rest, ok := strings.CutPrefix(line, "ok"); ok {
			return strings.TrimSpace(rest), nil
		}
		return "", h.failed(errors.New(strings.TrimSpace(strings.TrimPrefix(line, "error"))))
	case <-timer.C:
		return "", h.failed(fmt.Errorf("no answer to %q within %v", cmd, helperAnswerTimeout))
	case <-ctx.Done():
		return "", h.failed(ctx.Err())
	}
}

// failed marks the helper broken and says why.
func (h *helper) failed(err error) error {
	h.broken.Store(true)
	msg := fmt.Sprintf("%s helper of %s: %v", h.kind, h.node, err)
	if s := strings.TrimSpace(h.stderr.String()); s != "" {
		msg += " (its stderr: " + oneLine(s) + ")"
	}
	return errors.New(msg)
}

func (h *helper) isBroken() bool { return h.broken.Load() }

// close kills and removes the helper. It is not told to heal (the end of
// its input would): a helper is retired because its namespace is gone, or
// because it broke and a new one already holds the namespace's state, which
// a late heal of the old one would undo. Its heal at the end of its input
// is for a harness that dies.
func (h *helper) close(ctx context.Context, r *Runtime) {
	r.cli.ContainerRemove(ctx, h.id, container.RemoveOptions{Force: true})
	h.att.Close()
}

// lockedBuffer collects a helper's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 4096 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
