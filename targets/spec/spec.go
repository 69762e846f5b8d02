// Package spec runs any fencing system that speaks Fencing API v1 from a
// spec file: host processes started from a command line, containers from a
// locally built image, or a system that is already running at a URL; some
// of its nodes may only hold data (a database, a consensus member). The spec
// is JSON, decoded strictly: a misspelt field is an error that names where it
// is, never a silently ignored setting, because a gate that tests something
// other than what its author wrote is worse than no gate. A spec becomes a
// table of nodes (package harness/nodes), which runs them and carries out
// every fault.
package spec

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fencecheck/fencecheck/checkers"
)

// Spec describes one fencing system under test.
type Spec struct {
	// Name names the system in reports and the run store.
	Name string `json:"name"`
	// FencingAPI is the contract version the system speaks; only "v1"
	// exists. Optional.
	FencingAPI string `json:"fencing_api,omitempty"`
	// Semantics are what the system declares about its tokens; omitted
	// fields take the defaults (equal: reject, scope: per-lock,
	// authenticated: false).
	Semantics SemanticsSpec `json:"semantics"`
	// StartTimeout bounds the wait for each node's health ("30s" when
	// omitted).
	StartTimeout Duration `json:"start_timeout,omitempty"`
	Nodes        []Node   `json:"nodes"`

	// Dir is the folder of the spec file: command nodes run there, so a
	// spec can name its programs relative to itself.
	Dir string `json:"-"`
	// Path is the file the spec was read from ("" when parsed from bytes).
	Path string `json:"-"`
}

// SemanticsSpec is the spec's semantics block (checkers.Semantics in words).
type SemanticsSpec struct {
	Equal         string `json:"equal,omitempty"`
	Scope         string `json:"scope,omitempty"`
	Authenticated bool   `json:"authenticated,omitempty"`
}

// Node is one process of the system. Image, URL or SSH says what kind it
// is; a node with none of them is a command node.
type Node struct {
	Name string `json:"name"`
	// Roles are "issuer", "resource" or both (the Fencing API it serves),
	// or "data" alone: a node that only holds the system's state.
	Roles []string `json:"roles"`
	// Command is a host process's command line (placeholders are
	// substituted: see docs/spec.md); for an image node it replaces the
	// image's command.
	Command []string `json:"command,omitempty"`
	// Image is a locally built Docker image; Port the container port the
	// node listens on ({port}); Data the path inside that survives
	// restarts.
	Image string `json:"image,omitempty"`
	Port  int    `json:"port,omitempty"`
	Data  string `json:"data,omitempty"`
	// Ports are more named ports ({port:NAME}, {addr:NODE:NAME}): for an
	// image node each one's number inside the container ({"peer": 2380});
	// for a command node a list of names, each given a free loopback port
	// (["peer"]), held as names with 0.
	Ports map[string]int `json:"ports,omitempty"`
	// URL is the base URL of a node that is already running.
	URL string `json:"url,omitempty"`
	// SSH says the node runs on a host fencecheck reaches over SSH: its
	// command runs there, its port is the number it listens on there.
	SSH *SSHSpec `json:"ssh,omitempty"`
	// Env is added to the node's environment (values are substituted like
	// the command line).
	Env map[string]string `json:"env,omitempty"`
	// Clock says how the clock nemesis moves the node's wall clock: ""
	// (the default) moves the clock of the unmodified process itself
	// (package timewarp: its vDSO, and libc through a preload library);
	// "offset-file" leaves it to the program, which adds the offset in the
	// file named by FENCECHECK_CLOCK_FILE; "none" keeps the node out of
	// clock faults.
	Clock string `json:"clock,omitempty"`
	// Health is how fencecheck knows the node serves (default: GET
	// /v1/health for an issuer or resource, a TCP connection to a data
	// node's port).
	Health *Probe `json:"health,omitempty"`
	// Leader says yes on the node that currently leads (a primary, a raft
	// leader), so that pauses, kills and cuts can aim at it.
	Leader *Probe `json:"leader,omitempty"`
	// Stateless says the node keeps no state of its own (an adapter in
	// front of data nodes): restarts prefer the others, power losses pass
	// it by. Default: true for an issuer or resource of a spec that has
	// data nodes, false otherwise.
	Stateless *bool `json:"stateless,omitempty"`
	// Log names the node's write-ahead log: paths relative to its data
	// folder ("member/wal"), whose fsync makes what the node answers
	// durable. A power cut timed by an acknowledgement then slows only
	// those fsyncs (nemesis.LogPather).
	Log []string `json:"log,omitempty"`
}

// Probe asks a node one yes/no question: GET HTTP answered 200, a TCP
// connection accepted, or Command's exit status 0 (run on this machine).
// Port names one of the node's ports ("": the main one, {port}).
type Probe struct {
	HTTP    string   `json:"http,omitempty"`
	TCP     bool     `json:"tcp,omitempty"`
	Command []string `json:"command,omitempty"`
	Port    string   `json:"port,omitempty"`
}

// SSHSpec is how fencecheck reaches an ssh node's host. Empty fields are
// taken from ~/.ssh/config, then the defaults (port 22, the local user, the
// ssh-agent and ~/.ssh keys, ~/.ssh/known_hosts).
type SSHSpec struct {
	Host string `json:"host"`
	Port int    `json:"port,omitempty"`
	User string `json:"user,omitempty"`
	// Key is a private key file (relative to the spec's folder).
	Key string `json:"key,omitempty"`
	// KnownHosts is a known_hosts file (relative to the spec's folder).
	KnownHosts string `json:"known_hosts,omitempty"`
	// InsecureIgnoreHostKey skips the host key check, loudly: for
	// throw-away labs only.
	InsecureIgnoreHostKey bool `json:"insecure_ignore_host_key,omitempty"`
	// Address is where the other nodes and fencecheck's clients reach the
	// node (default: the host).
	Address string `json:"address,omitempty"`
	// Workdir is the folder on the host the run's folder goes in (default
	// /tmp); Dir where the command runs (default: the node's folder on the
	// host, which holds {data}).
	Workdir string `json:"workdir,omitempty"`
	Dir     string `json:"dir,omitempty"`
}

// Node kinds.
const (
	KindCommand = "command"
	KindImage   = "image"
	KindURL     = "url"
	KindSSH     = "ssh"
)

// Roles.
const (
	RoleIssuer   = "issuer"
	RoleResource = "resource"
	RoleData     = "data"
)

// Clock modes. With ClockOffsetFile the harness writes the node's offset
// from real time, in decimal nanoseconds, to the file named by ClockFileEnv
// (replaced by rename, so a reader never sees half a number), and the
// program adds it itself; the default moves the process's own clock.
const (
	ClockOffsetFile = "offset-file"
	ClockNone       = "none"
	ClockFileEnv    = "FENCECHECK_CLOCK_FILE"
)

// DefaultStartTimeout bounds the wait for a node's health when the spec does
// not say.
const DefaultStartTimeout = 30 * time.Second

// Kind is command, image, ssh or url.
func (n Node) Kind() string {
	switch {
	case n.Image != "":
		return KindImage
	case n.URL != "":
		return KindURL
	case n.SSH != nil:
		return KindSSH
	}
	return KindCommand
}

// ClockOptIn reports whether the node reads the clock offset file itself.
func (n Node) ClockOptIn() bool { return n.Clock == ClockOffsetFile }

// ClockWarped reports whether the harness moves the node's process clock
// itself (a started node that neither reads the offset file nor opted out).
func (n Node) ClockWarped() bool { return n.Kind() != KindURL && n.Clock == "" }

// ModelSemantics is the semantics block as the models take it.
func (s *Spec) ModelSemantics() checkers.Semantics {
	sem := checkers.DefaultSemantics()
	if s.Semantics.Equal != "" {
		sem.Equal = checkers.Equal(s.Semantics.Equal)
	}
	if s.Semantics.Scope != "" {
		sem.Scope = checkers.Scope(s.Semantics.Scope)
	}
	sem.Authenticated = s.Semantics.Authenticated
	return sem
}

// Timeout is the health wait per node.
func (s *Spec) Timeout() time.Duration {
	if s.StartTimeout > 0 {
		return time.Duration(s.StartTimeout)
	}
	return DefaultStartTimeout
}

// Duration is a JSON string such as "30s" (Go duration syntax).
type Duration time.Duration

// UnmarshalJSON accepts "30s", "1m30s", ...
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("must be a duration string such as %q", "30s")
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf(`must be a positive duration such as "30s", got %q`, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration back as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Load reads and validates the spec at path.
func Load(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
		if b, err = yamlToJSON(b, path); err != nil {
			return nil, err
		}
	}
	s, err := parse(b, path)
	if err != nil {
		return nil, err
	}
	s.Path = path
	s.Dir = filepath.Dir(abs)
	return s, nil
}

// yamlToJSON lets a spec be written in YAML: the document becomes the same
// JSON the strict decoder reads, so the rules and the error paths are one.
func yamlToJSON(b []byte, path string) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, &Error{File: path, Problems: []Problem{{Message: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}}
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, &Error{File: path, Problems: []Problem{{Message: "YAML that has no JSON form (keys must be strings): " + err.Error()}}}
	}
	return out, nil
}

// Parse decodes and validates a spec from JSON. Relative paths in command
// nodes resolve against the current directory.
func Parse(data []byte) (*Spec, error) {
	s, err := parse(data, "")
	if err != nil {
		return nil, err
	}
	s.Dir, _ = os.Getwd()
	return s, nil
}

func parse(data []byte, file string) (*Spec, error) {
	d := &decoder{}
	var s Spec
	d.object(data, "", s.fields())
	probs := d.problems
	// Validation runs even after decoding problems, so one attempt lists
	// everything; but a field that failed to decode is not also "missing",
	// and a file that is not a JSON object has nothing more to say.
	if len(probs) == 0 || probs[0].Path != "" {
		bad := map[string]bool{}
		for _, p := range probs {
			bad[p.Path] = true
		}
		for _, p := range s.validate() {
			if !bad[p.Path] {
				probs = append(probs, p)
			}
		}
	}
	if len(probs) > 0 {
		return nil, &Error{File: file, Problems: probs}
	}
	return &s, nil
}
