package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

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

// field is one field of a spec object: where its value goes and what it
// must be, or how to decode it when it is an object or a list of its own.
// The fields of each object, in order, are also what an unknown field's
// error lists.
type field struct {
	name   string
	into   any
	want   string
	decode func(d *decoder, raw []byte, path string)
}

func (s *Spec) fields() []field {
	return []field{
		{name: "name", into: &s.Name, want: "a string"},
		{name: "fencing_api", into: &s.FencingAPI, want: "a string"},
		{name: "semantics", decode: func(d *decoder, raw []byte, path string) { d.object(raw, path, s.Semantics.fields()) }},
		{name: "start_timeout", into: &s.StartTimeout, want: `a duration string such as "30s"`},
		{name: "nodes", decode: func(d *decoder, raw []byte, path string) {
			var nodes []json.RawMessage
			if err := json.Unmarshal(raw, &nodes); err != nil || nodes == nil {
				d.add(path, "must be a list of nodes")
				return
			}
			s.Nodes = make([]Node, len(nodes))
			for i, n := range nodes {
				d.object(n, fmt.Sprintf("%s[%d]", path, i), s.Nodes[i].fields())
			}
		}},
	}
}

func (s *SemanticsSpec) fields() []field {
	return []field{
		{name: "equal", into: &s.Equal, want: "a string"},
		{name: "scope", into: &s.Scope, want: "a string"},
		{name: "authenticated", into: &s.Authenticated, want: "true or false"},
	}
}

const commandWant = "a list of strings (the program and its arguments)"

func (n *Node) fields() []field {
	probe := func(p **Probe) func(d *decoder, raw []byte, path string) {
		return func(d *decoder, raw []byte, path string) {
			*p = &Probe{}
			d.object(raw, path, (*p).fields())
		}
	}
	return []field{
		{name: "name", into: &n.Name, want: "a string"},
		{name: "roles", into: &n.Roles, want: "a list of strings"},
		{name: "command", into: &n.Command, want: commandWant},
		{name: "image", into: &n.Image, want: "a string"},
		{name: "port", into: &n.Port, want: "an integer"},
		{name: "ports", decode: n.decodePorts},
		{name: "data", into: &n.Data, want: "a string"},
		{name: "url", into: &n.URL, want: "a string"},
		{name: "ssh", decode: func(d *decoder, raw []byte, path string) {
			n.SSH = &SSHSpec{}
			d.object(raw, path, n.SSH.fields())
		}},
		{name: "env", into: &n.Env, want: "an object of strings"},
		{name: "clock", into: &n.Clock, want: "a string"},
		{name: "health", decode: probe(&n.Health)},
		{name: "leader", decode: probe(&n.Leader)},
		{name: "stateless", into: &n.Stateless, want: "true or false"},
		{name: "log", into: &n.Log, want: "a list of paths relative to the node's data folder"},
	}
}

func (s *SSHSpec) fields() []field {
	return []field{
		{name: "host", into: &s.Host, want: "a host name or address"},
		{name: "port", into: &s.Port, want: "an integer"},
		{name: "user", into: &s.User, want: "a string"},
		{name: "key", into: &s.Key, want: "a private key file"},
		{name: "known_hosts", into: &s.KnownHosts, want: "a known_hosts file"},
		{name: "insecure_ignore_host_key", into: &s.InsecureIgnoreHostKey, want: "true or false"},
		{name: "address", into: &s.Address, want: "a host name or address"},
		{name: "workdir", into: &s.Workdir, want: "an absolute path on the host"},
		{name: "dir", into: &s.Dir, want: "an absolute path on the host"},
	}
}

func (p *Probe) fields() []field {
	return []field{
		{name: "http", into: &p.HTTP, want: `a path such as "/health"`},
		{name: "tcp", into: &p.TCP, want: "true or false"},
		{name: "command", into: &p.Command, want: commandWant},
		{name: "port", into: &p.Port, want: "the name of one of the node's ports"},
	}
}

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

// object decodes raw (a JSON object) into the given fields, recursing into
// the nested objects the spec has.
func (d *decoder) object(raw []byte, path string, fields []field) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		d.add(path, "%s", describeJSONError(raw, err, "an object"))
		return
	}
	if m == nil {
		d.add(path, "must be an object, not null")
		return
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		i := slices.Index(names, k)
		if i < 0 {
			msg := fmt.Sprintf("unknown field %q", k)
			if near := nearest(k, names); near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			} else {
				msg += " (known: " + strings.Join(names, ", ") + ")"
			}
			d.add(join(path, k), "%s", msg)
			continue
		}
		if f := fields[i]; f.decode != nil {
			f.decode(d, m[k], join(path, k))
		} else {
			d.field(m[k], join(path, k), f.into, f.want)
		}
	}
}

// decodePorts decodes a node's named ports: an object of numbers (an image
// node's ports inside its container) or a list of names (a command node's,
// each given a loopback port; held with 0).
func (n *Node) decodePorts(d *decoder, raw []byte, path string) {
	var names []string
	if json.Unmarshal(raw, &names) == nil && names != nil {
		n.Ports = map[string]int{}
		for i, name := range names {
			if _, dup := n.Ports[name]; dup {
				d.add(fmt.Sprintf("%s[%d]", path, i), "port %q is listed twice", name)
			}
			n.Ports[name] = 0
		}
		return
	}
	d.field(raw, path, &n.Ports, `an object of port numbers ({"peer": 2380}) for an image node, or a list of names (["peer"]) for a command node`)
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
