package workloads

import (
	"fmt"
	"regexp"
)

// A namespace scopes every name a run sends to the system (lock names,
// resource keys, values): a system that outlives one run (a server someone
// else runs, a staging deployment) still holds what earlier runs wrote, and a
// run that used the same names would read those values as writes nobody made
// (phantom reads) and meet their high-water marks. Two runs at once against
// one server, each with its own namespace, never share a name either.

// NamespaceSep joins a namespace and a name: "r3f9a0c12.k0". Fencing API
// names allow [A-Za-z0-9._-], so the scoped name is still one.
const NamespaceSep = "."

// MaxNamespace bounds a namespace's length, so that the longest name a
// workload makes stays within the Fencing API's 128 bytes.
const MaxNamespace = 64

var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// CheckNamespace says what is wrong with a namespace given by hand ("" is
// none: names are used as they are).
func CheckNamespace(ns string) error {
	if ns == "" {
		return nil
	}
	if len(ns) > MaxNamespace || !namespaceRE.MatchString(ns) {
		return fmt.Errorf("must be 1-%d characters of A-Z a-z 0-9 _ -, got %q", MaxNamespace, ns)
	}
	return nil
}

// Scoped is name in namespace ns (name itself when ns is "").
func Scoped(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + NamespaceSep + name
}
