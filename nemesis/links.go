package nemesis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fencecheck/fencecheck/nemesis/proxy"
)

// ClientGroup is the From of every link that carries clients' traffic.
const ClientGroup = "clients"

// LinkSet is the harness's proxies between clients and nodes (and between
// nodes, where a target routes through them): a *proxy.Set. The strip, delay
// and partition nemeses act on traffic by switching its modes, so they work
// on any target, in-process or in containers.
type LinkSet interface {
	Links() []proxy.Info
	SetBlackhole(link string, on bool) error
	SetAnswersLost(link string, on bool) error
	SetStrip(link string, share float64) error
	SetDelay(link string, share float64, bound time.Duration) error
}

// linkSet is env's link set, when the harness interposed one.
func linkSet(env *Env) (LinkSet, bool) { return env.Links, env.Links != nil }

// clientLinks lists the links that carry clients' traffic.
func clientLinks(env *Env) []proxy.Info {
	ls, ok := linkSet(env)
	if !ok {
		return nil
	}
	var out []proxy.Info
	for _, l := range ls.Links() {
		if l.From == ClientGroup {
			out = append(out, l)
		}
	}
	return out
}

// noClientLinks is why a link nemesis cannot act.
const noClientLinks = "no proxies between clients and nodes (the harness interposes them when a strip, delay or partition nemesis is requested)"

func linkNames(ls []proxy.Info) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Name
	}
	return out
}

// forEachLink applies fn to every named link, joining the errors, so one
// failure does not leave the rest half-switched.
func forEachLink(names []string, fn func(name string) error) error {
	var errs []error
	for _, n := range names {
		if err := fn(n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkLinks says whether every named link is one of env's clients' links.
func checkLinks(env *Env, names []string) error {
	have := map[string]bool{}
	for _, l := range clientLinks(env) {
		have[l.Name] = true
	}
	for _, n := range names {
		if !have[n] {
			if len(have) == 0 {
				return fmt.Errorf("link %s: %s", n, noClientLinks)
			}
			return fmt.Errorf("no clients' link %s here (there are: %s)", n, strings.Join(sortedKeys(have), ", "))
		}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// stopNothing is the Stop of a fault with nothing to undo.
func stopNothing(context.Context) error { return nil }
