package nodes

import (
	"net"
	"regexp"
	"strconv"
	"strings"
)

// Placeholders in command lines, environment values and file contents:
//
//	{name}               the node's name
//	{run}                the run's id (harness.Env.RunID)
//	{port}, {port:NAME}  the port the node itself listens on (the number
//	                     inside its container; the loopback port picked for
//	                     a node on this machine)
//	{data}               its data folder, as the node sees it
//	{clock_file}         its clock offset file, as the node sees it
//	{addr:NODE}          another node's host:port (its main port), as the
//	{addr:NODE:PORT}     nodes reach each other; in a health or leader
//	                     command, as this machine reaches it
//
// Text that is not a placeholder ({"a":1}) passes through.
var placeholderRe = regexp.MustCompile(`\{([a-z_]+)(?::([^{}]*))?\}`)

// Placeholder is one {word} or {word:arg} of a template.
type Placeholder struct{ Word, Arg string }

// Placeholders lists the placeholders of a template, in order.
func Placeholders(tmpl string) []Placeholder {
	var out []Placeholder
	for _, m := range placeholderRe.FindAllStringSubmatch(tmpl, -1) {
		out = append(out, Placeholder{Word: m[1], Arg: m[2]})
	}
	return out
}

// Substitute fills a template's placeholders from vars ({addr:X} is looked
// up as "addr:X"); one it does not know stays as it is.
func Substitute(tmpl string, vars map[string]string) string {
	return placeholderRe.ReplaceAllStringFunc(tmpl, func(m string) string {
		if v, ok := vars[m[1:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// substituteAll fills every element.
func substituteAll(tmpls []string, vars map[string]string) []string {
	out := make([]string, len(tmpls))
	for i, t := range tmpls {
		out[i] = Substitute(t, vars)
	}
	return out
}

// substituteEnv fills the values of KEY=VALUE pairs.
func substituteEnv(env []string, vars map[string]string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		out[i] = k + "=" + Substitute(v, vars)
	}
	return out
}

// addrVars are the {addr:NODE} and {addr:NODE:PORT} placeholders of every
// node, each port's address given by addr.
func addrVars(ms []*member, addr func(m *member, port string) (string, bool)) map[string]string {
	vars := map[string]string{}
	for _, m := range ms {
		if m.Kind() == KindURL {
			if h := urlHost(m.URL); h != "" {
				vars["addr:"+m.Name] = h
			}
			continue
		}
		for _, p := range m.Ports {
			a, ok := addr(m, p.Name)
			if !ok {
				continue
			}
			if p.Name == "" {
				vars["addr:"+m.Name] = a
			} else {
				vars["addr:"+m.Name+":"+p.Name] = a
			}
		}
	}
	return vars
}

// netAddr is where the other nodes reach one of m's ports.
func netAddr(m *member, port string) (string, bool) {
	n, ok := m.bound[port]
	if !ok {
		return "", false
	}
	return net.JoinHostPort(m.host, strconv.Itoa(n)), true
}

// ownVars are a node's own placeholders, as it sees them.
func ownVars(m *member, data, clockFile string) map[string]string {
	v := map[string]string{"name": m.Name}
	for name, n := range m.bound {
		if name == "" {
			v["port"] = strconv.Itoa(n)
		} else {
			v["port:"+name] = strconv.Itoa(n)
		}
	}
	v["data"] = data // "" for a container node that keeps no data
	if clockFile != "" {
		v["clock_file"] = clockFile
	}
	return v
}

func merge(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
