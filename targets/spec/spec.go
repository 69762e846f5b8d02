// Package spec runs any fencing system that speaks Fencing API v1 from a
// spec file: host processes started from a command line, containers from a
// locally built image, or a system that is already running at a URL. The spec
// is JSON, decoded strictly: a misspelt field is an error that names where it
// is, never a silently ignored setting, because a gate that tests something
// other than what its author wrote is worse than no gate.
package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
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
	// StartTimeout bounds the wait for each node's GET /v1/health ("30s"
	// when omitted).
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

// Node is one process of the system. Exactly one of Command, Image or URL
// says what kind it is.
type Node struct {
	Name  string   `json:"name"`
	Roles []string `json:"roles"`
	// Command is a host process's command line ({port}, {data}, {name},
	// {clock_file} and {addr:NODE} are substituted); for an image node it
	// replaces the image's command.
	Command []string `json:"command,omitempty"`
	// Image is a locally built Docker image; Port the container port the
	// node listens on; Data the path inside that survives restarts.
	Image string `json:"image,omitempty"`
	Port  int    `json:"port,omitempty"`
	Data  string `json:"data,omitempty"`
	// URL is the base URL of a node that is already running.
	URL string `json:"url,omitempty"`
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
}

// Node kinds.
const (
	KindCommand = "command"
	KindImage   = "image"
	KindURL     = "url"
)

// Roles.
const (
	RoleIssuer   = "issuer"
	RoleResource = "resource"
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

// Kind is command, image or url.
func (n Node) Kind() string {
	switch {
	case n.Image != "":
		return KindImage
	case n.URL != "":
		return KindURL
	}
	return KindCommand
}

// HasRole reports whether the node serves role.
func (n Node) HasRole(role string) bool { return slices.Contains(n.Roles, role) }

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
		return errors.New(`must be a duration string such as "30s"`)
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

// Problem is one thing wrong with a spec, at a JSON path such as
// nodes[1].roles.
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Error lists every problem found in a spec, so its author can fix them all
// in one go.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	name := e.File
	if name == "" {
		name = "spec"
	}
	if len(e.Problems) == 1 {
		fmt.Fprintf(&b, "%s: %s", name, e.Problems[0])
		return b.String()
	}
	fmt.Fprintf(&b, "%s: %d problems:", name, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - " + p.String())
	}
	return b.String()
}

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
	d.object(data, "", &s, specFields)
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

// The fields each object may have, for unknown-field errors that say what
// was meant.
var (
	specFields      = []string{"name", "fencing_api", "semantics", "start_timeout", "nodes"}
	semanticsFields = []string{"equal", "scope", "authenticated"}
	nodeFields      = []string{"name", "roles", "command", "image", "port", "data", "url", "env", "clock"}
)

// decoder decodes one object level at a time so that every error carries
// its JSON path: encoding/json's own unknown-field error names no path.
type decoder struct{ problems []Problem }

func (d *decoder) add(path, format string, args ...any) {
	d.problems = append(d.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// object decodes raw (a JSON object) into v, a pointer to a struct with the
// given fields, recursing into the nested objects the spec has.
func (d *decoder) object(raw []byte, path string, v any, fields []string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		d.add(path, "%s", describeJSONError(raw, err, "an object"))
		return
	}
	if m == nil {
		d.add(path, "must be an object, not null")
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(fields, k) {
			msg := fmt.Sprintf("unknown field %q", k)
			if near := nearest(k, fields); near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			} else {
				msg += " (known: " + strings.Join(fields, ", ") + ")"
			}
			d.add(join(path, k), "%s", msg)
		}
	}
	switch t := v.(type) {
	case *Spec:
		for _, k := range keys {
			fp := join(path, k)
			switch k {
			case "semantics":
				d.object(m[k], fp, &t.Semantics, semanticsFields)
			case "nodes":
				var nodes []json.RawMessage
				if err := json.Unmarshal(m[k], &nodes); err != nil || nodes == nil {
					d.add(fp, "must be a list of nodes")
					continue
				}
				t.Nodes = make([]Node, len(nodes))
				for i, raw := range nodes {
					d.object(raw, fmt.Sprintf("%s[%d]", fp, i), &t.Nodes[i], nodeFields)
				}
			case "name":
				d.field(m[k], fp, &t.Name, "a string")
			case "fencing_api":
				d.field(m[k], fp, &t.FencingAPI, "a string")
			case "start_timeout":
				d.field(m[k], fp, &t.StartTimeout, `a duration string such as "30s"`)
			}
		}
	case *SemanticsSpec:
		for _, k := range keys {
			fp := join(path, k)
			switch k {
			case "equal":
				d.field(m[k], fp, &t.Equal, "a string")
			case "scope":
				d.field(m[k], fp, &t.Scope, "a string")
			case "authenticated":
				d.field(m[k], fp, &t.Authenticated, "true or false")
			}
		}
	case *Node:
		for _, k := range keys {
			fp := join(path, k)
			switch k {
			case "name":
				d.field(m[k], fp, &t.Name, "a string")
			case "roles":
				d.field(m[k], fp, &t.Roles, "a list of strings")
			case "command":
				d.field(m[k], fp, &t.Command, "a list of strings (the program and its arguments)")
			case "image":
				d.field(m[k], fp, &t.Image, "a string")
			case "port":
				d.field(m[k], fp, &t.Port, "an integer")
			case "data":
				d.field(m[k], fp, &t.Data, "a string")
			case "url":
				d.field(m[k], fp, &t.URL, "a string")
			case "env":
				d.field(m[k], fp, &t.Env, "an object of strings")
			case "clock":
				d.field(m[k], fp, &t.Clock, "a string")
			}
		}
	}
}

// field decodes one leaf value; want says what the field must be.
func (d *decoder) field(raw []byte, path string, v any, want string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			d.add(path, "must be %s", want)
			return
		}
		d.add(path, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

// describeJSONError says where a syntax error is (line and column), or what
// the value should have been.
func describeJSONError(raw []byte, err error, want string) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line, col := position(raw, syn.Offset)
		return fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, syn)
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("must be %s, not %s", want, typeErr.Value)
	}
	return "invalid JSON: " + err.Error()
}

func position(b []byte, off int64) (line, col int) {
	line, col = 1, 1
	// Offset counts the bytes read up to and including the bad one.
	for i := int64(0); i < off-1 && i < int64(len(b)); i++ {
		if b[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// nearest is the known field a typo most likely meant (edit distance at
// most 2), or "".
func nearest(k string, fields []string) string {
	best, bestD := "", 3
	for _, f := range fields {
		if dist := editDistance(strings.ToLower(k), f); dist < bestD {
			best, bestD = f, dist
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var (
	specNameRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	// placeholderRe finds {word} and {word:arg} in command lines and env.
	placeholderRe = regexp.MustCompile(`\{([a-z_]+)(?::([^{}]*))?\}`)
	envNameRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// validate checks what decoding cannot: required fields, one kind per node,
// names, roles, placeholders.
func (s *Spec) validate() []Problem {
	var probs []Problem
	add := func(path, format string, args ...any) {
		probs = append(probs, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	switch {
	case s.Name == "":
		add("name", "missing (a name for the system, e.g. \"my-fence\")")
	case !specNameRe.MatchString(s.Name):
		add("name", "must match [A-Za-z0-9._-]{1,64}, got %q", s.Name)
	}
	if s.FencingAPI != "" && s.FencingAPI != "v1" {
		add("fencing_api", "only \"v1\" exists, got %q", s.FencingAPI)
	}
	switch s.Semantics.Equal {
	case "", string(checkers.EqualReject), string(checkers.EqualAccept):
	default:
		add("semantics.equal", "must be \"reject\" or \"accept\", got %q", s.Semantics.Equal)
	}
	switch s.Semantics.Scope {
	case "", string(checkers.ScopePerLock), string(checkers.ScopeGlobal):
	default:
		add("semantics.scope", "must be \"per-lock\" or \"global\", got %q", s.Semantics.Scope)
	}
	if s.Nodes == nil {
		add("nodes", "missing (at least one node)")
		return probs
	}
	if len(s.Nodes) == 0 {
		add("nodes", "must list at least one node")
		return probs
	}
	names := map[string]int{}
	for i, n := range s.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		switch {
		case n.Name == "":
			add(p+".name", "missing (a name for the node, e.g. \"n1\")")
		case !nodeNameRe.MatchString(n.Name):
			add(p+".name", "must match [A-Za-z0-9_-]{1,32}, got %q", n.Name)
		case n.Name == "clients":
			add(p+".name", "\"clients\" is reserved for the harness's clients")
		default:
			if j, dup := names[n.Name]; dup {
				add(p+".name", "%q is already the name of nodes[%d]", n.Name, j)
			}
			names[n.Name] = i
		}
	}
	issuers, resources := 0, 0
	for i, n := range s.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		if n.Roles == nil {
			add(p+".roles", "missing (one or both of \"issuer\", \"resource\")")
		} else if len(n.Roles) == 0 {
			add(p+".roles", "must name one or both of \"issuer\", \"resource\"")
		}
		seen := map[string]bool{}
		for j, r := range n.Roles {
			switch {
			case r != RoleIssuer && r != RoleResource:
				add(fmt.Sprintf("%s.roles[%d]", p, j), "unknown role %q (roles are \"issuer\" and \"resource\")", r)
			case seen[r]:
				add(fmt.Sprintf("%s.roles[%d]", p, j), "role %q is listed twice", r)
			}
			seen[r] = true
		}
		if seen[RoleIssuer] {
			issuers++
		}
		if seen[RoleResource] {
			resources++
		}
		kinds := []string{}
		if n.Command != nil && n.Image == "" {
			kinds = append(kinds, "command")
		}
		if n.Image != "" {
			kinds = append(kinds, "image")
		}
		if n.URL != "" {
			kinds = append(kinds, "url")
		}
		switch {
		case len(kinds) == 0:
			add(p, "missing the node's kind: give \"command\" (a host process), \"image\" and \"port\" (a container), or \"url\" (a running system)")
			continue
		case len(kinds) > 1:
			add(p, "a node is one of command, image or url; this one has %s", strings.Join(kinds, " and "))
			continue
		}
		switch n.Clock {
		case "", ClockNone, ClockOffsetFile:
		default:
			add(p+".clock", "must be absent (fencecheck moves the process's clock), %q (the node reads the offset file named by $%s) or %q, got %q", ClockOffsetFile, ClockFileEnv, ClockNone, n.Clock)
		}
		for k := range n.Env {
			if !envNameRe.MatchString(k) {
				add(fmt.Sprintf("%s.env.%s", p, k), "is not a valid environment variable name")
			}
		}
		switch n.Kind() {
		case KindCommand:
			if len(n.Command) == 0 || n.Command[0] == "" {
				add(p+".command", "must name a program (and its arguments)")
			}
			if n.Port != 0 {
				add(p+".port", "only image nodes take a port; a command node gets a free port through {port}")
			}
			if n.Data != "" {
				add(p+".data", "only image nodes take a data path; a command node gets its data dir through {data}")
			}
			if !usesPlaceholder(n, "port") {
				add(p+".command", "never mentions {port}: the node must listen on the loopback port the harness picks")
			}
		case KindImage:
			if n.Port == 0 {
				add(p+".port", "missing (the container port the node listens on)")
			} else if n.Port < 1 || n.Port > 65535 {
				add(p+".port", "must be 1..65535, got %d", n.Port)
			}
			if n.Data != "" && !strings.HasPrefix(n.Data, "/") {
				add(p+".data", "must be an absolute path inside the container, got %q", n.Data)
			}
		case KindURL:
			u, err := url.Parse(n.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
				add(p+".url", "must be a base URL such as http://127.0.0.1:7001, got %q", n.URL)
			}
			if n.Command != nil || n.Port != 0 || n.Data != "" || len(n.Env) > 0 {
				add(p, "a url node is already running: command, port, data and env do not apply")
			}
			if n.ClockOptIn() {
				add(p+".clock", "a url node is not started by the harness, so it cannot be given a clock offset file")
			}
		}
		probs = append(probs, s.checkPlaceholders(i, n)...)
	}
	if issuers == 0 {
		add("nodes", "no node has the role \"issuer\": clients would have nowhere to send lock requests")
	}
	if resources == 0 {
		add("nodes", "no node has the role \"resource\": clients would have nowhere to send writes and reads")
	}
	return probs
}

func usesPlaceholder(n Node, word string) bool {
	for _, s := range allTemplates(n) {
		for _, m := range placeholderRe.FindAllStringSubmatch(s, -1) {
			if m[1] == word {
				return true
			}
		}
	}
	return false
}

func allTemplates(n Node) []string {
	out := slices.Clone(n.Command)
	for _, v := range n.Env {
		out = append(out, v)
	}
	return out
}

// checkPlaceholders rejects placeholders that would be passed through
// literally: a typo such as {prot} would otherwise start a node that listens
// nowhere useful.
func (s *Spec) checkPlaceholders(i int, n Node) []Problem {
	var probs []Problem
	where := func(j int) string {
		if j < len(n.Command) {
			return fmt.Sprintf("nodes[%d].command[%d]", i, j)
		}
		return fmt.Sprintf("nodes[%d].env", i)
	}
	for j, tmpl := range allTemplates(n) {
		for _, m := range placeholderRe.FindAllStringSubmatch(tmpl, -1) {
			switch m[1] {
			case "port", "data", "name", "clock_file":
				if m[2] != "" {
					probs = append(probs, Problem{where(j), fmt.Sprintf("{%s} takes no argument", m[1])})
				}
				if m[1] == "clock_file" && !n.ClockOptIn() {
					probs = append(probs, Problem{where(j), fmt.Sprintf("{clock_file} needs \"clock\": %q on the node", ClockOffsetFile)})
				}
			case "addr":
				peer := -1
				for k, o := range s.Nodes {
					if o.Name == m[2] {
						peer = k
					}
				}
				switch {
				case peer < 0:
					probs = append(probs, Problem{where(j), fmt.Sprintf("{addr:%s} names no node of this spec", m[2])})
				case s.Nodes[peer].Kind() != n.Kind() && s.Nodes[peer].Kind() != KindURL:
					probs = append(probs, Problem{where(j), fmt.Sprintf("{addr:%s}: a %s node cannot reach a %s node's address; use nodes of one kind", m[2], n.Kind(), s.Nodes[peer].Kind())})
				}
			default:
				probs = append(probs, Problem{where(j), fmt.Sprintf("unknown placeholder {%s} (known: {port}, {data}, {name}, {clock_file}, {addr:NODE})", m[1])})
			}
		}
	}
	return probs
}

// substitute fills a template's placeholders from vars ({addr:X} is looked up
// as "addr:X").
func substitute(tmpl string, vars map[string]string) string {
	return placeholderRe.ReplaceAllStringFunc(tmpl, func(m string) string {
		inner := m[1 : len(m)-1]
		if v, ok := vars[inner]; ok {
			return v
		}
		return m
	})
}

// portString is a port for substitution.
func portString(p int) string { return strconv.Itoa(p) }
