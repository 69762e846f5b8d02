package spec

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/checkers"
	"github.com/fencecheck/fencecheck/harness/nodes"
)

// What a spec, a node and an environment variable may be called.
var specNameRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
var nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// problems collects problems at JSON paths.
type problems []Problem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// validate checks what decoding cannot: required fields, one kind per node,
// names, roles, ports, probes, placeholders.
func (s *Spec) validate() []Problem {
	var probs problems
	switch {
	case s.Name == "":
		probs.add("name", "missing (a name for the system, e.g. \"my-fence\")")
	case !specNameRe.MatchString(s.Name):
		probs.add("name", "must match [A-Za-z0-9._-]{1,64}, got %q", s.Name)
	}
	if s.FencingAPI != "" && s.FencingAPI != "v1" {
		probs.add("fencing_api", "only \"v1\" exists, got %q", s.FencingAPI)
	}
	switch s.Semantics.Equal {
	case "", string(checkers.EqualReject), string(checkers.EqualAccept):
	default:
		probs.add("semantics.equal", "must be \"reject\" or \"accept\", got %q", s.Semantics.Equal)
	}
	switch s.Semantics.Scope {
	case "", string(checkers.ScopePerLock), string(checkers.ScopeGlobal):
	default:
		probs.add("semantics.scope", "must be \"per-lock\" or \"global\", got %q", s.Semantics.Scope)
	}
	if s.Nodes == nil {
		probs.add("nodes", "missing (at least one node)")
		return probs
	}
	if len(s.Nodes) == 0 {
		probs.add("nodes", "must list at least one node")
		return probs
	}
	names := map[string]int{}
	for i, n := range s.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		switch {
		case n.Name == "":
			probs.add(p+".name", "missing (a name for the node, e.g. \"n1\")")
		case !nodeNameRe.MatchString(n.Name):
			probs.add(p+".name", "must match [A-Za-z0-9_-]{1,32}, got %q", n.Name)
		case n.Name == "clients":
			probs.add(p+".name", "\"clients\" is reserved for the harness's clients")
		default:
			if j, dup := names[n.Name]; dup {
				probs.add(p+".name", "%q is already the name of nodes[%d]", n.Name, j)
			}
			names[n.Name] = i
		}
	}
	issuers, resources := 0, 0
	for i, n := range s.Nodes {
		s.validateNode(&probs, i, n)
		if n.HasRole(RoleIssuer) {
			issuers++
		}
		if n.HasRole(RoleResource) {
			resources++
		}
	}
	if issuers == 0 {
		probs.add("nodes", "no node has the role \"issuer\": clients would have nowhere to send lock requests")
	}
	if resources == 0 {
		probs.add("nodes", "no node has the role \"resource\": clients would have nowhere to send writes and reads")
	}
	return probs
}

// validateNode checks one node.
func (s *Spec) validateNode(probs *problems, i int, n Node) {
	p := fmt.Sprintf("nodes[%d]", i)
	checkRoles(probs, p, n)
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
	if n.SSH != nil {
		kinds = append(kinds, "ssh")
		if len(kinds) == 2 && kinds[0] == "command" {
			kinds = kinds[1:] // an ssh node's command runs on its host
		}
	}
	switch {
	case len(kinds) == 0:
		probs.add(p, "missing the node's kind: give \"command\" (a host process), \"image\" and \"port\" (a container), \"ssh\", \"command\" and \"port\" (a program on a host reached over SSH), or \"url\" (a running system)")
		return
	case len(kinds) > 1:
		probs.add(p, "a node is one of command, image, ssh or url; this one has %s", strings.Join(kinds, " and "))
		return
	}
	switch n.Clock {
	case "", ClockNone, ClockOffsetFile:
	default:
		probs.add(p+".clock", "must be absent (fencecheck moves the process's clock), %q (the node reads the offset file named by $%s) or %q, got %q", ClockOffsetFile, ClockFileEnv, ClockNone, n.Clock)
	}
	for k := range n.Env {
		if !envNameRe.MatchString(k) {
			probs.add(fmt.Sprintf("%s.env.%s", p, k), "is not a valid environment variable name")
		}
	}
	for j, l := range n.Log {
		if l == "" || strings.HasPrefix(l, "/") || slices.Contains(strings.Split(l, "/"), "..") {
			probs.add(fmt.Sprintf("%s.log[%d]", p, j), "must be a path relative to the node's data folder, inside it (\"member/wal\"), got %q", l)
		}
	}
	if len(n.Log) > 0 && (n.Kind() == KindURL || n.Kind() == KindImage && n.Data == "") {
		probs.add(p+".log", "names a log in a data folder the node does not have (an image node's data path, a command or ssh node's {data})")
	}
	data := n.HasRole(RoleData)
	switch n.Kind() {
	case KindCommand:
		if len(n.Command) == 0 || n.Command[0] == "" {
			probs.add(p+".command", "must name a program (and its arguments)")
		}
		if n.Port != 0 {
			probs.add(p+".port", "only image nodes take a port; a command node gets a free port through {port}")
		}
		if n.Data != "" {
			probs.add(p+".data", "only image nodes take a data path; a command node gets its data dir through {data}")
		}
		if !data && !usesPlaceholder(n, "port") {
			probs.add(p+".command", "never mentions {port}: the node must listen on the loopback port the harness picks")
		}
		for name, num := range n.Ports {
			if num != 0 {
				probs.add(p+".ports."+name, "a command node's ports are picked by the harness: list their names ([\"%s\"])", name)
			}
		}
	case KindImage:
		switch {
		case n.Port == 0 && !(data && len(n.Ports) > 0):
			probs.add(p+".port", "missing (the container port the node listens on)")
		case n.Port < 0 || n.Port > 65535:
			probs.add(p+".port", "must be 1..65535, got %d", n.Port)
		}
		if n.Data != "" && !strings.HasPrefix(n.Data, "/") {
			probs.add(p+".data", "must be an absolute path inside the container, got %q", n.Data)
		}
		for name, num := range n.Ports {
			if num < 1 || num > 65535 {
				probs.add(p+".ports."+name, "an image node gives each port its number inside the container (1..65535), got %d", num)
			}
		}
	case KindSSH:
		checkSSH(probs, p, n)
	case KindURL:
		u, err := url.Parse(n.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			probs.add(p+".url", "must be a base URL such as http://127.0.0.1:7001, got %q", n.URL)
		}
		if n.Command != nil || n.Port != 0 || n.Data != "" || len(n.Env) > 0 || n.Ports != nil {
			probs.add(p, "a url node is already running: command, port, ports, data and env do not apply")
		}
		if n.ClockOptIn() {
			probs.add(p+".clock", "a url node is not started by the harness, so it cannot be given a clock offset file")
		}
	}
	for name := range n.Ports {
		if !portNameRe.MatchString(name) {
			probs.add(p+".ports", "port name %q must match [a-z][a-z0-9_]{0,31}", name)
		}
	}
	s.checkProbe(probs, p+".health", n, n.Health, false)
	s.checkProbe(probs, p+".leader", n, n.Leader, true)
	if data && n.Health == nil && !hasMainPort(n) {
		probs.add(p+".health", "missing: a data node answers no GET /v1/health, and has no port ({\"tcp\": true}) to ask; give {\"tcp\": true, \"port\": NAME} or {\"command\": [...]}")
	}
	*probs = append(*probs, s.checkPlaceholders(i, n)...)
}

// portNameRe is what a named port may be called.
var portNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

func hasMainPort(n Node) bool { return n.Kind() == KindCommand || n.Port != 0 }

// checkSSH: a host, a command, the ports the node listens on at the host.
func checkSSH(probs *problems, p string, n Node) {
	s := n.SSH
	if s.Host == "" {
		probs.add(p+".ssh.host", "missing (the host to reach over SSH, or its ~/.ssh/config alias)")
	}
	if s.Port < 0 || s.Port > 65535 {
		probs.add(p+".ssh.port", "must be 1..65535, got %d", s.Port)
	}
	for _, f := range []struct{ name, v string }{{"workdir", s.Workdir}, {"dir", s.Dir}} {
		if f.v != "" && !strings.HasPrefix(f.v, "/") {
			probs.add(p+".ssh."+f.name, "must be an absolute path on the host, got %q", f.v)
		}
	}
	if len(n.Command) == 0 || n.Command[0] == "" {
		probs.add(p+".command", "must name the program on the host (and its arguments)")
	}
	switch {
	case n.Port == 0 && !(n.HasRole(RoleData) && len(n.Ports) > 0):
		probs.add(p+".port", "missing (the port the node listens on at its host)")
	case n.Port < 0 || n.Port > 65535:
		probs.add(p+".port", "must be 1..65535, got %d", n.Port)
	}
	if n.Data != "" {
		probs.add(p+".data", "an ssh node gets its data folder on its host through {data}")
	}
	for name, num := range n.Ports {
		if num < 1 || num > 65535 {
			probs.add(p+".ports."+name, "an ssh node gives each port its number on the host (1..65535), got %d", num)
		}
	}
}

// checkRoles: one or both of issuer and resource, or data alone.
func checkRoles(probs *problems, p string, n Node) {
	if n.Roles == nil {
		probs.add(p+".roles", "missing (one or both of \"issuer\", \"resource\"); a node that only holds data says [\"data\"]")
	} else if len(n.Roles) == 0 {
		probs.add(p+".roles", "must name one or both of \"issuer\", \"resource\", or \"data\"")
	}
	seen := map[string]bool{}
	for j, r := range n.Roles {
		switch {
		case r != RoleIssuer && r != RoleResource && r != RoleData:
			probs.add(fmt.Sprintf("%s.roles[%d]", p, j), "unknown role %q (roles are \"issuer\", \"resource\" and \"data\")", r)
		case seen[r]:
			probs.add(fmt.Sprintf("%s.roles[%d]", p, j), "role %q is listed twice", r)
		}
		seen[r] = true
	}
	if seen[RoleData] && (seen[RoleIssuer] || seen[RoleResource]) {
		probs.add(p+".roles", "\"data\" is a node that serves no Fencing API: it stands alone")
	}
}

// checkProbe checks a health or leader probe: one question, on a port the
// node has.
func (s *Spec) checkProbe(probs *problems, p string, n Node, pr *Probe, leader bool) {
	if pr == nil {
		return
	}
	asked := 0
	for _, b := range []bool{pr.HTTP != "", pr.TCP, pr.Command != nil} {
		if b {
			asked++
		}
	}
	switch {
	case asked != 1:
		probs.add(p, "give one of \"http\" (a path), \"tcp\": true or \"command\"")
	case leader && pr.TCP:
		probs.add(p+".tcp", "a connection says nothing about who leads: give \"http\" or \"command\"")
	case pr.HTTP != "" && !strings.HasPrefix(pr.HTTP, "/"):
		probs.add(p+".http", "must be a path such as \"/health\", got %q", pr.HTTP)
	case pr.Command != nil && (len(pr.Command) == 0 || pr.Command[0] == ""):
		probs.add(p+".command", "must name a program (and its arguments)")
	}
	if pr.Port != "" {
		if _, ok := n.Ports[pr.Port]; !ok {
			probs.add(p+".port", "names no port of the node (its ports: %s)", portNames(n))
		}
	} else if pr.Command == nil && !hasMainPort(n) && n.Kind() != KindURL {
		probs.add(p+".port", "missing: the node has no main port (\"port\") to ask")
	}
	for j, a := range pr.Command {
		for _, ph := range nodes.Placeholders(a) {
			if ph.Word == "data" || ph.Word == "clock_file" {
				probs.add(fmt.Sprintf("%s.command[%d]", p, j), "{%s} is the node's own; a probe runs on this machine", ph.Word)
			} else if msg := s.placeholderProblem(n, ph); msg != "" {
				probs.add(fmt.Sprintf("%s.command[%d]", p, j), "%s", msg)
			}
		}
	}
}

func portNames(n Node) string {
	var names []string
	if hasMainPort(n) {
		names = append(names, "port")
	}
	for k := range n.Ports {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func usesPlaceholder(n Node, word string) bool {
	for _, s := range allTemplates(n) {
		for _, ph := range nodes.Placeholders(s) {
			if ph.Word == word {
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
		for _, ph := range nodes.Placeholders(tmpl) {
			if ph.Word == "clock_file" && !n.ClockOptIn() {
				probs = append(probs, Problem{where(j), fmt.Sprintf("{clock_file} needs \"clock\": %q on the node", ClockOffsetFile)})
			}
			if msg := s.placeholderProblem(n, ph); msg != "" {
				probs = append(probs, Problem{where(j), msg})
			}
		}
	}
	return probs
}

// placeholderProblem says what is wrong with one placeholder of node n's
// ("" when nothing is).
func (s *Spec) placeholderProblem(n Node, ph nodes.Placeholder) string {
	switch ph.Word {
	case "data", "name", "clock_file":
		if ph.Arg != "" {
			return fmt.Sprintf("{%s} takes no argument", ph.Word)
		}
	case "port":
		if _, ok := n.Ports[ph.Arg]; ph.Arg != "" && !ok {
			return fmt.Sprintf("{port:%s} names no port of the node (its ports: %s)", ph.Arg, portNames(n))
		}
	case "addr":
		name, port, _ := strings.Cut(ph.Arg, ":")
		k := slices.IndexFunc(s.Nodes, func(o Node) bool { return o.Name == name })
		switch {
		case k < 0:
			return fmt.Sprintf("{addr:%s} names no node of this spec", ph.Arg)
		case s.Nodes[k].Kind() != n.Kind() && s.Nodes[k].Kind() != KindURL:
			return fmt.Sprintf("{addr:%s}: a %s node cannot reach a %s node's address; use nodes of one kind", ph.Arg, n.Kind(), s.Nodes[k].Kind())
		case port != "":
			if _, ok := s.Nodes[k].Ports[port]; !ok {
				return fmt.Sprintf("{addr:%s}: node %s has no port %q (its ports: %s)", ph.Arg, name, port, portNames(s.Nodes[k]))
			}
		}
	default:
		return fmt.Sprintf("unknown placeholder {%s} (known: {port}, {port:NAME}, {data}, {name}, {clock_file}, {addr:NODE}, {addr:NODE:PORT})", ph.Word)
	}
	return ""
}
