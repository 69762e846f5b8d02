// Package hostagent is fencecheck's helper on a host it reaches over SSH:
// a small static program (cmd/fencehost) that fencecheck copies to each
// host and runs there for the length of a run. It starts the nodes' programs,
// each in a process group of its own, and carries out every fault on them
// with the same code as on the control machine: SIGSTOP and SIGCONT of the
// group (pause), kill -9 (restart), the lazyfs layer under the node's data
// (power loss), the vDSO patch of its processes (clock), and nftables
// tables tagged with the run (partition, link loss).
//
// The agent holds a lease: every line from its controller renews it, and
// the controller sends one a second. When the lease runs out or the
// controller's connection ends (a lost network, a kill -9 of fencecheck),
// the agent heals what it did (clocks back, rules removed, paused programs
// continued), kills the programs it started, takes its mounts down, removes
// its folder (itself included) and exits: nothing of the run is left on the
// host. Jepsen leaves a partitioned cluster when its control node dies; the
// agent does not.
//
// The protocol is JSON lines over the agent's standard input and output:
// one Request a line in, one Response a line out for every request with a
// non-zero id, in any order (requests run concurrently).
package hostagent

import (
	"time"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// Version names the protocol; the controller refuses an agent that speaks
// another.
const Version = "fencehost/1"

// DefaultLease is how long the agent waits for its controller's next line
// before it heals and exits.
const DefaultLease = 5 * time.Second

// Ops.
const (
	OpHello      = "hello"      // -> Hello
	OpPrepare    = "prepare"    // node folders and files -> Data, ClockFile
	OpLayer      = "layer"      // lazyfs over the node's data -> Data (the mount)
	OpStart      = "start"      // the node's program -> PGID
	OpRunning    = "running"    // -> Running, Status
	OpSignal     = "signal"     // Signal ("STOP", "CONT") to the group
	OpKill       = "kill"       // kill -9 of the group, waited for
	OpTerminate  = "terminate"  // SIGTERM, SIGKILL after Grace
	OpWipe       = "wipe"       // empty the node's data, files written again
	OpPowerLoss  = "power-loss" // drop what was not fsynced (Crash: keep part of it) -> Loss
	OpPending    = "pending"    // what a power loss would drop now -> Loss
	OpArmCut     = "arm-cut"    // the power goes at the next fsync within Window (a power-loss follows)
	OpDiskFaults = "disk-faults"
	OpCorrupt    = "corrupt"    // damage one durable file -> Corrupted
	OpUnmount    = "unmount"    // take the layer down
	OpClock      = "clock"      // the group's wall clock to Offset -> Processes, Injected
	OpClockSync  = "clock-sync" // give new processes the offset in force
	OpClockReach = "clock-reach"
	OpClockFile  = "clock-file" // write Offset into the node's offset file
	OpCut        = "cut"        // drop traffic with Peers (none: heal)
	OpLose       = "lose"       // lose Percent % of what is sent to Peers (none: heal)
	OpDelay      = "delay"      // hold what is sent to Peers Delay ± Jitter (none: heal)
	OpDup        = "dup"        // send Percent % of what goes to Peers twice (none: heal)
	OpTail       = "tail"       // the last Lines of the node's log -> Text
	OpBye        = "bye"        // heal, stop, unmount, remove the folder, exit
	OpRenew      = "renew"      // (id 0) renews the lease only
)

// Request is one line to the agent.
type Request struct {
	ID   uint64 `json:"id,omitempty"`
	Op   string `json:"op"`
	Node string `json:"node,omitempty"`
	// start
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// prepare, wipe
	Files     map[string]string `json:"files,omitempty"`
	ClockFile bool              `json:"clock_file,omitempty"`
	// signal
	Signal string `json:"signal,omitempty"`
	// terminate
	Grace time.Duration `json:"grace_ns,omitempty"`
	// arm-cut
	Window time.Duration `json:"window_ns,omitempty"`
	// clock, clock-file
	Offset time.Duration `json:"offset_ns,omitempty"`
	// cut: Peers both ways, To one way (netcut.Cut)
	Peers []string `json:"peers,omitempty"`
	To    []string `json:"to,omitempty"`
	// lose, dup: Percent percent of the packets to Peers (netcut.Loss)
	Percent int `json:"percent,omitempty"`
	// delay: what is sent to Peers waits Delay ± Jitter (netcut.Delay)
	Delay  time.Duration `json:"delay_ns,omitempty"`
	Jitter time.Duration `json:"jitter_ns,omitempty"`
	// tail
	Lines int `json:"lines,omitempty"`
	// layer: the backing folder and mount point to use instead of the
	// node's folders under the agent's (a local agent serves the layers of
	// nodes whose folders the harness made); the mount point is removed
	// when the layer comes down.
	Backing string `json:"backing,omitempty"`
	Mount   string `json:"mount,omitempty"`
	// power-loss, disk-faults, corrupt
	Crash      *lazyfs.CrashState `json:"crash,omitempty"`
	Faults     *lazyfs.Faults     `json:"faults,omitempty"`
	Corruption *lazyfs.Corruption `json:"corruption,omitempty"`
}

// Response is the agent's answer to one request.
type Response struct {
	ID    uint64 `json:"id"`
	Error string `json:"error,omitempty"`

	Hello     *Hello            `json:"hello,omitempty"`
	Data      string            `json:"data,omitempty"`
	ClockFile string            `json:"clock_file,omitempty"`
	PGID      int               `json:"pgid,omitempty"`
	Running   bool              `json:"running,omitempty"`
	Status    string            `json:"status,omitempty"`
	Loss      lazyfs.Loss       `json:"loss"`
	Processes int               `json:"processes,omitempty"`
	Injected  int               `json:"injected,omitempty"`
	Why       string            `json:"why,omitempty"`
	Text      string            `json:"text,omitempty"`
	Corrupted *lazyfs.Corrupted `json:"corrupted,omitempty"`
}

// Hello is what the agent says of itself and its host: each "Why" field is
// "" when the host can take that fault, or why it cannot.
type Hello struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	UID     int    `json:"uid"`
	// Dir is the agent's folder on the host (nodes/, logs/, the agent).
	Dir string `json:"dir"`
	// FUSEWhy: the lazyfs layer (power loss) cannot be mounted.
	FUSEWhy string `json:"fuse_why,omitempty"`
	// NetfilterWhy: nftables rules (partitions) cannot be set.
	NetfilterWhy string `json:"netfilter_why,omitempty"`
	// ClockWhy: processes cannot be patched (the platform).
	ClockWhy string `json:"clock_why,omitempty"`
	// Controller is the address the controller's SSH connection comes
	// from (SSH_CONNECTION): a cut never drops it.
	Controller string `json:"controller,omitempty"`
	Lease      string `json:"lease"`
}
