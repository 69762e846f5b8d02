package workloads

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// A Profile is one traffic shape, in the spirit of etcd robustness' traffic
// profiles: every flaw needs its own shape to show (a key that sits idle, a
// lock held long, a holder that never releases, many acquires at once). A
// writer follows one profile; a run's mix gives each writer one (Mix).
type Profile struct {
	Name string
	// Shape is the traffic in words; For the failures it is for.
	Shape, For string
	// prefix names the profile's keys (prefix+i); keys is how many for a
	// run configured with --keys n.
	prefix string
	keys   func(n int) int
	// zipf > 1 skews key popularity (key 0 hottest); 0 is uniform.
	zipf float64
	// think is the idle time between a writer's cycles, [min, max].
	think [2]time.Duration
	// writes is how many writes a holder makes per lease, [min, max]; more
	// than one makes a long holder that renews between them.
	writes [2]int
	// crash is the share of leases whose holder crashes while holding:
	// it never writes again nor releases, and the lock is free only once
	// the lease ran out.
	crash float64
	// storm > 1 makes each cycle that many acquires of one lock at the same
	// instant, by as many processes.
	storm int
	// coldStall is the share of cycles on a cold key (the colder half) whose
	// holder stalls for seconds to tens of seconds while another client
	// takes the lock and writes; the key then sits idle until the stale
	// holder writes.
	coldStall float64
}

// Profiles are the workload's traffic profiles, by name. "steady" is the
// shape of every run before profiles existed.
var Profiles = []Profile{
	{Name: "steady", prefix: "k", keys: func(n int) int { return n },
		Shape: "uniform keys, back-to-back cycles: acquire, write, sometimes a replay and a read, release",
		For:   "counter reset, replays accepted, missing tokens, restarts, forged tokens: the default shape", writes: [2]int{1, 1}},
	{Name: "skewed", prefix: "s", keys: func(n int) int { return max(8*n, 16) }, zipf: 1.3,
		think:  [2]time.Duration{10 * time.Millisecond, 60 * time.Millisecond},
		writes: [2]int{1, 1}, coldStall: 0.25,
		Shape: "Zipf-skewed key popularity over many keys: a few hot, the cold ones idle for seconds to tens of seconds; some holders of cold keys stall 3-15 s while another client takes the lock, then write with their old token",
		For:   "a resource that forgets the high-water mark of an idle key (evicted, expired or cached), stale writes after long idleness"},
	{Name: "many-locks", prefix: "m", keys: func(n int) int { return max(64, 20*n) },
		writes: [2]int{1, 1},
		Shape:  "uniform over many locks (64 or more), each seeing little contention",
		For:    "per-lock state kept in a bounded table (counters or high-water marks lost when it fills), token scope mistakes (per-lock against global)"},
	{Name: "long-holders", prefix: "l", keys: func(n int) int { return n },
		writes: [2]int{4, 12},
		Shape:  "holders keep the lock for several leases, renewing every third of one and writing many times with the same token",
		For:    "renew bugs (a renew that revives an expired or taken-over lease), replays of one holder's token, lease overlaps while a node stalls"},
	{Name: "crashing-holders", prefix: "c", keys: func(n int) int { return n },
		writes: [2]int{0, 1}, crash: 0.5,
		think: [2]time.Duration{0, 20 * time.Millisecond},
		Shape: "half the holders crash while holding: they never release, so every next acquire waits for a lease to run out",
		For:   "issuers that mishandle expiry (grant a token twice, reuse the expired holder's token, never free the lock), takeovers racing the expiry"},
	{Name: "storm", prefix: "x", keys: func(int) int { return 1 }, storm: 4,
		writes: [2]int{1, 1},
		Shape:  "acquire storms: four acquires of one lock at the same instant, over and over",
		For:    "issuers whose check-and-grant is not atomic (two holders, or two grants of one token), counters that race"},
}

// ProfileNames lists the profiles, then "idle" and "all".
func ProfileNames() []string {
	var out []string
	for _, p := range Profiles {
		out = append(out, p.Name)
	}
	return append(out, ProfileIdle, ProfileAll)
}

// splitIdle takes "idle" out of a parsed --profile list: it names the idle
// probes, not a writer's profile. "all" (nil) has them; a list that names
// only "idle" leaves the writers steady.
func splitIdle(names []string) (writers []string, idle bool) {
	if names == nil {
		return nil, true
	}
	for _, n := range names {
		if n == ProfileIdle {
			idle = true
		} else {
			writers = append(writers, n)
		}
	}
	if len(writers) == 0 {
		writers = []string{Profiles[0].Name}
	}
	return writers, idle
}

// ProfileAll is the mix drawn from the seed (Mix), the default.
const ProfileAll = "all"

// ProfileByName finds a profile.
func ProfileByName(name string) (Profile, bool) {
	for _, p := range Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// ParseProfile checks a --profile value: "all" or a comma-separated list of
// profile names.
func ParseProfile(spec string) ([]string, error) {
	if spec == "" || spec == ProfileAll {
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(spec, ",") {
		n = strings.TrimSpace(n)
		if _, ok := ProfileByName(n); !ok && n != ProfileIdle {
			return nil, fmt.Errorf("unknown profile %q (profiles: %s)", n, strings.Join(ProfileNames(), ", "))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// Mix gives each of clients writers a profile. With names, writers take them
// in turn; with none ("all"), writer 0 follows steady and the others a
// shuffle of the other profiles drawn from the seed, so one seed is one mix.
func Mix(names []string, clients int, seed uint64) []Profile {
	if len(names) == 0 {
		rest := make([]string, 0, len(Profiles)-1)
		for _, p := range Profiles[1:] {
			rest = append(rest, p.Name)
		}
		rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
		names = append([]string{Profiles[0].Name}, rest...)
	}
	out := make([]Profile, clients)
	for i := range out {
		out[i], _ = ProfileByName(names[i%len(names)])
	}
	return out
}

// keyNames lists the keys of the profiles in mix (each profile's once), in
// namespace ns.
func keyNames(ns string, mix []Profile, n int) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range mix {
		if seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		for i := 0; i < p.keys(n); i++ {
			out = append(out, Scoped(ns, p.key(i)))
		}
	}
	return out
}

// KeysInWords says how many keys the run's writers use, in all and per
// profile: --keys is what each profile scales its own keys from, not the
// total ("95 keys: steady 3, skewed 24, many-locks 64, ...").
func (w *Fenced) KeysInWords() string {
	var parts []string
	seen := map[string]bool{}
	for _, p := range w.mix {
		if !seen[p.Name] {
			seen[p.Name] = true
			parts = append(parts, fmt.Sprintf("%s %d", p.Name, p.keys(w.cfg.Keys)))
		}
	}
	if len(w.idle) > 0 {
		parts = append(parts, fmt.Sprintf("idle probes %d", len(w.idle)))
	}
	return fmt.Sprintf("%d keys: %s", len(w.keys), strings.Join(parts, ", "))
}

func (p Profile) key(i int) string { return fmt.Sprintf("%s%d", p.prefix, i) }

// picker draws a profile's keys for one writer.
type picker struct {
	p    Profile
	n    int
	zipf *rand.Zipf
}

func newPicker(p Profile, keys int, rng *rand.Rand) *picker {
	k := &picker{p: p, n: p.keys(keys)}
	if p.zipf > 1 && k.n > 1 {
		k.zipf = rand.NewZipf(rng, p.zipf, 1, uint64(k.n-1))
	}
	return k
}

// pick draws a key's index.
func (k *picker) pick(rng *rand.Rand) int {
	if k.zipf != nil {
		return int(k.zipf.Uint64())
	}
	return rng.IntN(k.n)
}

// cold says whether key i is in the colder half of a skewed profile.
func (k *picker) cold(i int) bool { return k.zipf != nil && i >= k.n/2 }

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

func betweenInt(rng *rand.Rand, lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + rng.IntN(hi-lo+1)
}
