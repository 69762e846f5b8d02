package zookeeper

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/harness/docker"
	"github.com/fencecheck/fencecheck/harness/nodes"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/targets/adapted"
)

// Ports inside the containers.
const (
	clientPort   = 2181
	quorumPort   = 2888
	electionPort = 3888
)

// TickTime is the ensemble's tick (ms). ZooKeeper grants session timeouts
// between 2 and 20 ticks, so with 500 ms the harness's 1 s leases are
// granted as asked, and every fault that outlasts a lease outlasts the
// session (with the default 2000 ms tick a 1 s request becomes 4 s).
const TickTime = 500

// Paths inside a server's container.
const (
	dataInContainer   = "/data"
	configInContainer = dataInContainer + "/zoo.cfg"
)

// Options configure the zookeeper target.
type Options struct {
	// Servers is the ensemble's size (default 3).
	Servers int
	// Adapters is the number of adapter replicas (default 2); clients are
	// spread over them.
	Adapters int
	// Log receives setup messages (default: the run's log).
	Log io.Writer
	_   struct{}
}

// Target is a ZooKeeper ensemble and adapters (the fenced server with the
// zookeeper backend) in containers on the run's own network: a table of
// nodes (harness/nodes) plus who leads. The adapters hold no fencing state:
// any of them can serve any resource request, and a lock lives in the
// session of the adapter that took it.
type Target struct {
	*nodes.Cluster
	servers []string
}

var _ nemesis.Leaderer = (*Target)(nil)

// New returns the zookeeper target; nothing runs until Start.
func New(opts Options) *Target {
	if opts.Servers <= 0 {
		opts.Servers = 3
	}
	t := &Target{}
	for i := 1; i <= opts.Servers; i++ {
		t.servers = append(t.servers, fmt.Sprintf("zk-%d", i))
	}
	cmd := append([]string{Java}, jvmArgs...)
	cmd = append(cmd, "-cp", LibDir+"/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain", configInContainer)
	var table []nodes.Node
	var list []string
	for i, name := range t.servers {
		list = append(list, "{addr:"+name+"}")
		table = append(table, nodes.Node{Name: name, Role: "zookeeper",
			Ports: []nodes.Port{{Number: clientPort}, {Name: "quorum", Number: quorumPort}, {Name: "election", Number: electionPort}},
			// Its myid and zoo.cfg, written again after a wipe: it rejoins
			// with nothing and syncs from the leader, as after a disk
			// replacement. zoo.cfg lives with the data: with dynamic
			// reconfiguration the server rewrites it, and writes the
			// membership it learns beside it (zoo.cfg.dynamic.VERSION).
			Data: nodes.Data{Path: dataInContainer, Files: map[string]string{"myid": strconv.Itoa(i+1) + "\n", "zoo.cfg": t.zooCfg()},
				NoLayer: "the lazyfs layer is not yet tried with ZooKeeper"},
			// The JVM reads the wall clock through libc: the preload library
			// shifts it from the first instruction (the runtime's vDSO patch
			// reaches it too); session expiry runs on the monotonic clock.
			Clock: nodes.Clock{Via: nodes.ClockProcesses, Preload: true},
			// A server serves only in a quorum.
			Health:    nodes.Health{Probe: nodes.Probe{Func: serving}, Timeout: 90 * time.Second, Quorum: true},
			Container: &nodes.Container{Build: ImageName, Cmd: cmd}})
	}
	table = append(table, adapted.Adapters{Count: opts.Adapters,
		Args: []string{"--backend", "zookeeper", "--zk-servers", strings.Join(list, ",")},
		Clock: nodes.Clock{Via: nodes.ClockNone,
			Why: "the zookeeper adapter reads no clock: sessions expire on the ensemble's monotonic clocks"},
		Health: nodes.Health{Timeout: 30 * time.Second, Quorum: true}}.Nodes()...)
	t.Cluster = nodes.Must(nodes.New("zookeeper", Semantics, table, nodes.Options{Log: opts.Log}))
	return t
}

// zooCfg is the servers' configuration: ZooKeeper's defaults but for the
// tick (see TickTime), no admin web server, no per-address connection cap
// (every adapter opens a session per lock holder), small preallocated log
// files, and dynamic reconfiguration on (the member-replace nemesis: see
// members.go). Transaction logs are fsynced before an answer (forceSync,
// the default).
func (t *Target) zooCfg() string {
	lines := make([]string, len(t.servers))
	for i, n := range t.servers {
		lines[i] = serverLine(i+1, "{addr:"+n+":quorum}")
	}
	return staticCfg() + strings.Join(lines, "\n") + "\n"
}

// staticCfg is the part of zoo.cfg that is not the membership.
func staticCfg() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\ninitLimit=10\nsyncLimit=5\n", TickTime)
	fmt.Fprintf(&b, "dataDir=%s\nclientPort=%d\nmaxClientCnxns=0\n", dataInContainer, clientPort)
	b.WriteString("admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok,mntr\npreAllocSize=4096\n")
	b.WriteString("reconfigEnabled=true\n")
	return b.String()
}

// serverLine is a member's line in the ensemble's membership, as
// dynamic reconfiguration writes it: quorum and election ports, a voting
// member, its client port on every address.
func serverLine(id int, quorumAddr string) string {
	return fmt.Sprintf("server.%d=%s:%d:participant;%d", id, quorumAddr, electionPort, clientPort)
}

// jvmArgs keep the JVM small and quick to start on two cores: a 128 MB
// heap, the serial collector, the C1 compiler only, no perf-data file.
var jvmArgs = []string{
	"-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
	"-Djava.net.preferIPv4Stack=true",
	// The administrator who may reconfigure the ensemble (members.go).
	"-Dzookeeper.DigestAuthenticationProvider.superDigest=" + superDigest(),
	// Values up to the Fencing API's 1 MiB, plus the mark, fit in a znode.
	"-Djute.maxbuffer=4194304",
	"-Dorg.slf4j.simpleLogger.showDateTime=true",
	"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
}

// System names the ZooKeeper release, from the Debian package its image is
// assembled from, and the ensemble's size.
func (t *Target) System(ctx context.Context) (string, error) {
	s, err := docker.DebianSystem(ctx, "ZooKeeper", hostZooKeeperJar)
	if err != nil {
		return "", err
	}
	s += fmt.Sprintf(", %d server", len(t.servers))
	if len(t.servers) != 1 {
		s += "s"
	}
	return s, nil
}

// ServerAddr is a server's client port as the host reaches it (published on
// 127.0.0.1).
func (t *Target) ServerAddr(name string) (string, error) { return t.HostAddr(name, "") }

// fourLetter sends a four-letter command to a server at addr and returns
// its answer.
func fourLetter(ctx context.Context, addr, cmd string) (string, error) {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(c))
	if err != nil && len(b) == 0 {
		return "", err
	}
	return string(b), nil
}

// modeAt is a server's role in the ensemble ("leader", "follower"), or an
// error while it is not serving (not in a quorum, starting, frozen).
func modeAt(ctx context.Context, addr string) (string, error) {
	out, err := fourLetter(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("not serving: %q", strings.TrimSpace(out))
}

// serving succeeds once the server at addr serves requests.
func serving(ctx context.Context, addr string) error {
	_, err := modeAt(ctx, addr)
	return err
}

// mode is a named server's role in the ensemble.
func (t *Target) mode(ctx context.Context, name string) (string, error) {
	addr, err := t.ServerAddr(name)
	if err != nil {
		return "", err
	}
	return modeAt(ctx, addr)
}

// waitServing polls a server until it serves requests.
func (t *Target) waitServing(ctx context.Context, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if _, last = t.mode(ctx, name); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("not serving after %s: %v", timeout, last)
}

// Leader names the server that reports itself leader. Servers that are
// frozen or cut off do not answer within the short timeout.
func (t *Target) Leader(ctx context.Context) (string, error) {
	var lastErr error
	for _, n := range t.servers {
		m, err := t.mode(ctx, n)
		if err != nil {
			lastErr = err
			continue
		}
		if m == "leader" {
			return n, nil
		}
	}
	return "", fmt.Errorf("no zookeeper server reports itself leader (last error: %v)", lastErr)
}
