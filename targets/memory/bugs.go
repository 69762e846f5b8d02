package memory

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fencecheck/fencecheck/fencing"
)

// Bug names one deliberate fault of the reference: each is one way real
// fencing implementations break (design §2), and each changes only what it
// names so that the checker's report can be held against a known cause.
type Bug string

const (
	// CounterInMemory: the issuer's counter is not persisted; a restart hands
	// out small tokens again. Everything else stays durable.
	CounterInMemory Bug = "counter-in-memory"
	// WallclockTokens: a token is the issuer's clock in milliseconds, so a
	// clock step back (or two acquires in one millisecond) repeats tokens.
	WallclockTokens Bug = "wallclock-tokens"
	// AcceptEqual: the resource accepts a token equal to its high-water mark
	// (a replay).
	AcceptEqual Bug = "accept-equal"
	// MissingAsZero: a write without a token is treated as token 0 and the
	// check is skipped (server layer).
	MissingAsZero Bug = "missing-as-zero"
	// ForgetHighwater: the resource keeps high-water marks and values only in
	// memory; a restart forgets them.
	ForgetHighwater Bug = "forget-highwater"
	// SplitIssuers: the lock service is two replicas that share one counter
	// through a leader while they can reach each other and issue from their
	// own copies when they cannot (see NewSplitIssuers).
	SplitIssuers Bug = "split-issuers"
	// OneWayFailover: the same two replicas, safe against a cut both ways:
	// the leader confirms each token with the follower and issues nothing
	// while it cannot, the follower issues from its copy only when it
	// cannot connect to the leader. The leader takes the follower's copy
	// only when it reconnects, so a follower that cannot reach a leader
	// that still reaches it issues the leader's next tokens: only a one-way
	// cut shows it (see NewSplitIssuers).
	OneWayFailover Bug = "one-way-failover"
	// RejoinEmpty: two issuer replicas whose failover is a membership
	// change, safe against every cut, restart and pause: the leader issues
	// each token once the follower recorded it, the follower issues from
	// its copy only while the leader is removed from the pair, and a
	// member added back must first copy the counters of the one that
	// stayed. The bug: it is added back on its empty data folder and
	// grants from nothing: a re-added leader issues 1, 2, 3 again. Only
	// the member-replace nemesis shows it (see NewMemberPair).
	RejoinEmpty Bug = "rejoin-empty"
	// AcceptForged: tokens are sealed but the resource does not verify the
	// seal (server layer).
	AcceptForged Bug = "accept-forged"
	// CounterNoFsync: the issuer writes its counters to a file of their own
	// in place, without fsync (the rest of the state stays durable). A kill
	// -9 keeps them (the page cache survives it); a power loss leaves the
	// file empty, and the issuer hands out small tokens again. Only the
	// power-loss nemesis shows it.
	CounterNoFsync Bug = "counter-no-fsync"
	// HighwaterNoFsync: the resource writes its high-water marks and values
	// to a file of their own without fsync; a power loss forgets them.
	HighwaterNoFsync Bug = "highwater-no-fsync"
	// ForgetIdle: the resource forgets the high-water mark of a key that
	// has had no accepted write for ForgetIdleAfter, as a mark kept under a
	// TTL renewed at each write does (the time of the last write is stored
	// with the mark, so a restart does not reset it); the value stays. Only a run that leaves a key idle that
	// long and then writes to it with an older token shows it (the idle
	// probes, docs/workloads.md).
	ForgetIdle Bug = "forget-idle"
	// ForgetIdleSinceStart: forget-idle with its timers rebuilt at start,
	// as a server that keeps them in memory does: a key forgets its mark
	// once ForgetIdleAfter has passed since both its last accepted write
	// and the store's start. Only a run that leaves a key idle that long
	// with no restart or power loss of the node in between shows it (a
	// quiet idle period, docs/coverage.md).
	ForgetIdleSinceStart Bug = "forget-idle-since-start"
	// AckBeforeFsync: each group commit writes the snapshot and renames it
	// into place, answers everyone it covers, and only then fsyncs the file
	// and the folder (a group commit that syncs after it replies, or a
	// background flusher): what was acknowledged is lost if the power goes
	// in the few milliseconds of that fsync. A kill -9 keeps it (the page
	// cache survives it); only a power loss in that window shows it.
	AckBeforeFsync Bug = "ack-before-fsync"
	// IgnoreWriteErrors: the store keeps no state between operations (each
	// reads the snapshot, changes it, writes it back durably, one at a
	// time) and takes a failed write for done: the error is dropped and
	// the operation answered as a success. On a full disk every write
	// fails (the temp file needs new space), so every operation reads the
	// state from before the disk filled: the issuer hands out the same
	// token again and again, and the resource forgets the marks and values
	// it acknowledged. A kill or a power loss finds everything acknowledged
	// on the disk; only a full disk (or a failing one) shows it.
	IgnoreWriteErrors Bug = "ignore-write-errors"
	// TrustTruncatedState: at start a snapshot that cannot be read (cut
	// short, a bit flipped: its checksum fails, or not JSON) is taken for
	// a fresh one and the store starts from nothing, where the correct
	// reference refuses to start on it: tokens start again at 1 and every
	// mark is forgotten. Only a damaged disk (disk-corrupt) shows it: the
	// store's writes are atomic, so a crash or a power loss never leaves
	// such a file.
	TrustTruncatedState Bug = "trust-truncated-state"
	// NoFencing: the resource accepts any write that carries a token,
	// whatever its high-water mark (lease-only safety). It still records the
	// token of each value.
	NoFencing Bug = "no-fencing"
)

// AllBugs lists every bug switch, in the design's order.
func AllBugs() []Bug {
	return []Bug{CounterInMemory, WallclockTokens, AcceptEqual, MissingAsZero, ForgetHighwater, SplitIssuers, OneWayFailover, RejoinEmpty, AcceptForged, NoFencing, CounterNoFsync, HighwaterNoFsync, ForgetIdle, ForgetIdleSinceStart, AckBeforeFsync, IgnoreWriteErrors, TrustTruncatedState}
}

// Bugs is a set of bug switches; the zero value is the correct reference.
type Bugs map[Bug]bool

// ParseBugs reads bug names; each argument may hold several, comma
// separated. An unknown name is an error that lists the valid ones.
func ParseBugs(names ...string) (Bugs, error) {
	valid := map[Bug]bool{}
	for _, b := range AllBugs() {
		valid[b] = true
	}
	bugs := Bugs{}
	for _, arg := range names {
		for _, n := range strings.Split(arg, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if !valid[Bug(n)] {
				all := make([]string, 0, len(valid))
				for _, b := range AllBugs() {
					all = append(all, string(b))
				}
				return nil, fmt.Errorf("unknown bug %q; valid bugs: %s", n, strings.Join(all, ", "))
			}
			bugs[Bug(n)] = true
		}
	}
	return bugs, nil
}

// Has reports whether b is switched on.
func (bs Bugs) Has(b Bug) bool { return bs[b] }

// Paired says whether the bugs run the issuer as two replicas
// (split-issuers, one-way-failover, rejoin-empty): one node cannot.
func (bs Bugs) Paired() bool {
	return bs.Has(SplitIssuers) || bs.Has(OneWayFailover) || bs.Has(RejoinEmpty)
}

// String lists the switched-on bugs, comma separated and sorted.
func (bs Bugs) String() string {
	var out []string
	for b, on := range bs {
		if on {
			out = append(out, string(b))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// Server returns the bugs that live in the HTTP layer.
func (bs Bugs) Server() fencing.ServerBugs {
	return fencing.ServerBugs{MissingAsZero: bs.Has(MissingAsZero), AcceptForged: bs.Has(AcceptForged)}
}
