package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// TrackRow is one line of the track record (docs/track-record.md, `make
// track-record`): a real system at a real release, the published issue or
// analysis the row reproduces, and the verdict the row must keep. It runs
// as a matrix Row; the system and release it reports are the ones the run
// says it used (results.json's run.system), not a claim of this table.
type TrackRow struct {
	Row
	// Reproduces is the published issue or analysis, as Markdown.
	Reproduces string
	// Finding is the finding the row re-finds when its verdict is valid
	// (a lease overlap fencing survives: "lease_overlaps"); "" for a row
	// whose find is the verdict itself.
	Finding string
}

// TrackRows are the rows of the track record. A broken row's find is an
// invalid verdict; a finding row's, its finding beside a valid verdict; the
// correct counterpart's, a valid verdict.
var TrackRows = []TrackRow{
	{Row: Row{Name: "redis-everysec", Target: "redis-everysec", Broken: true, Nemesis: "power-loss",
		Mode: "appendfsync everysec: acknowledged before fsynced, the last second lost at a power loss"},
		Reproduces: "Redis's own persistence documentation: with `appendfsync everysec` \"you can lose 1 second of data\" ([redis.io: persistence](https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/)); Kleppmann, [How to do distributed locking](https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html) (2016), on locks kept in Redis without fsync"},
	{Row: Row{Name: "redis-always", Target: "redis", Nemesis: "power-loss",
		Mode: "appendfsync always: fsynced before the answer"},
		Reproduces: "the counterpart of `redis-everysec`: the same Redis with the policy its documentation names durable"},
	{Row: Row{Name: "postgres-async", Target: "postgres-async", Broken: true, Nemesis: "restart",
		Mode: "synchronous_commit = off: acknowledged commits vanish at a crash (kill -9)"},
		Reproduces: "PostgreSQL's documentation, [Asynchronous Commit](https://www.postgresql.org/docs/15/wal-async-commit.html): \"the most recent transactions that were reported to the client as committed\" can be lost at a crash"},
	{Row: Row{Name: "postgres-sync", Target: "postgres", Nemesis: "restart",
		Mode: "synchronous_commit = on (the default)"},
		Reproduces: "the counterpart of `postgres-async`"},
	{Row: Row{Name: "etcd-mutex-3.5", Target: "etcd-mutex", Nemesis: "pause", Args: []string{"--version=3.5"},
		Mode: "etcd's client lock (concurrency.Mutex): a holder whose session's keep-alives stop loses the lock while it is told nothing"},
		Finding:    "lease_overlaps",
		Reproduces: "Jepsen, [etcd 3.4.3](https://jepsen.io/analyses/etcd-3.4.3) (2020): etcd's locks are not mutually exclusive (two holders at once); fenced by the token, so the verdict is valid and the overlap a finding"},
	{Row: Row{Name: "etcd-mutex-3.7", Target: "etcd-mutex", Nemesis: "pause",
		Mode: "the same, at the default release"},
		Finding:    "lease_overlaps",
		Reproduces: "the same analysis, at a release five years later: the lock API's contract did not change"},
	{Row: Row{Name: "etcd-lock-3.7", Target: "etcd", Nemesis: "pause,partition",
		Mode: "etcd with its lease-bound lock key and one Txn per write"},
		Reproduces: "the counterpart: the same cluster, fencing checked in the same transaction as the write"},
}

// selectTrackRows are the track rows named (nil: all of them).
func selectTrackRows(names []string) ([]Row, error) {
	var out []Row
	for _, t := range TrackRows {
		if len(names) == 0 {
			out = append(out, t.Row)
		}
	}
	for _, n := range names {
		t, ok := trackRow(n)
		if !ok {
			var known []string
			for _, t := range TrackRows {
				known = append(known, t.Name)
			}
			return nil, fmt.Errorf("unknown track-record row %q (known: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, t.Row)
	}
	return out, nil
}

// trackRow finds a track row by name.
func trackRow(name string) (TrackRow, bool) {
	for _, r := range TrackRows {
		if r.Name == name {
			return r, true
		}
	}
	return TrackRow{}, false
}

// found is whether one run re-found what its row reproduces: an invalid
// verdict for a broken row, the finding beside a valid one for a finding
// row, a valid verdict for a correct row.
func (t TrackRow) found(o Outcome) bool {
	switch {
	case t.Broken:
		return o.Detected()
	case t.Finding != "":
		return o.Exit == 0 && o.Metrics[t.Finding] > 0
	}
	return o.Exit == 0
}

// expected says in words what the row must show.
func (t TrackRow) expected() string {
	switch {
	case t.Broken:
		return "invalid"
	case t.Finding != "":
		return "valid, " + strings.ReplaceAll(t.Finding, "_", " ") + " found"
	}
	return "valid"
}

// changed says why a row no longer shows what it reproduces ("" when it
// does): a broken row found in no run, or a run of a valid row that was
// not valid, or a finding row's finding in no run.
func (t TrackRow) changed(os []Outcome) string {
	if len(os) == 0 {
		return "no run"
	}
	found := 0
	for _, o := range os {
		if !t.Broken && o.Exit != 0 {
			return fmt.Sprintf("seed %d: exit %d (%s), expected valid", o.Seed, o.Exit, cmpOr(o.Verdict, o.Err))
		}
		if t.found(o) {
			found++
		}
	}
	if found == 0 {
		return "found in no run"
	}
	return ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TrackPassed is whether every row still shows what it reproduces.
func (m *Matrix) TrackPassed() bool {
	for _, r := range m.Rows {
		t, _ := trackRow(r.Name)
		if t.changed(m.Outcomes[r.Name]) != "" {
			return false
		}
	}
	return !m.Interrupted
}

// TrackMarkdown renders docs/track-record.md.
func (m *Matrix) TrackMarkdown() string {
	var b strings.Builder
	c := m.Config
	fmt.Fprintf(&b, "# Track record\n\n<!-- Generated by cmd/matrix --track-record; do not edit by hand. -->\n\n")
	fmt.Fprintf(&b, "Real systems at real releases, each row a published issue or analysis that fencecheck re-finds "+
		"black-box, beside the correct counterpart that must stay valid. Regenerate with `make track-record` "+
		"(`ROWS=a,b` for some rows; SEEDS and TIME override 3 and 20s); a row whose verdict changes makes the command fail. This file came from:\n\n    %s\n\n", c.Command)
	fmt.Fprintf(&b, "How measured: each row is `fencecheck test --target T --nemesis N --time %s --seed S` with the row's flags, seeds %d..%d, "+
		"%d at a time on a machine with %d CPUs (shared), %s in all (%s). The system column is what the runs said they ran (results.json `run.system`: "+
		"the Debian package's version, or the etcd release built here from the Go module proxy). **Found** counts the runs that showed what the row reproduces: "+
		"an invalid verdict for a broken row; for a finding row, a valid verdict with the finding (a lease overlap the token fenced off); for a correct row, a valid verdict.\n\n",
		c.Time, c.FirstSeed, c.FirstSeed+uint64(c.Seeds)-1, c.Parallel, m.CPUs, m.Elapsed.Round(time.Second), m.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "| row | system (measured) | reproduces | faults | expected | found | verdicts | |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range m.Rows {
		t, _ := trackRow(r.Name)
		os := m.Outcomes[r.Name]
		systems := map[string]bool{}
		verdicts := map[string]int{}
		found := 0
		for _, o := range os {
			if o.System != "" {
				systems[o.System] = true
			}
			verdicts[cmpOr(o.Verdict, "could not run")]++
			if t.found(o) {
				found++
			}
		}
		var sys []string
		for s := range systems {
			sys = append(sys, s)
		}
		sort.Strings(sys)
		mark := "✓"
		if why := t.changed(os); why != "" {
			mark = "⚠ " + why
		}
		faults := "`" + r.Nemesis + "`"
		if len(r.Args) > 0 {
			faults += " (`" + strings.Join(r.Args, " ") + "`)"
		}
		fmt.Fprintf(&b, "| `%s`: %s | %s | %s | %s | %s | %d/%d | %s | %s |\n", r.Name, r.Mode, cmpOr(strings.Join(sys, "; "), "–"),
			t.Reproduces, faults, t.expected(), found, len(os), countList(verdicts), mark)
	}
	fmt.Fprintf(&b, "\n## Runs to look at\n\n")
	listed := false
	for _, r := range m.Rows {
		t, _ := trackRow(r.Name)
		for _, o := range m.Outcomes[r.Name] {
			if !t.found(o) {
				listed = true
				fmt.Fprintf(&b, "- %s, seed %d: exit %d, verdict %q%s. Reproduce: `fencecheck %s`\n", r.Name, o.Seed, o.Exit, o.Verdict, errSuffix(o),
					strings.Join(c.Args(r, o.Seed, "store"), " "))
			}
		}
	}
	if !listed {
		fmt.Fprintf(&b, "None: every run showed what its row reproduces.\n")
	}
	if m.TrackPassed() {
		fmt.Fprintf(&b, "\n**Result: every row keeps its verdict.**\n")
	} else {
		fmt.Fprintf(&b, "\n**Result: a row changed** (marked ⚠ above).\n")
	}
	return b.String()
}
