package main

import (
	"encoding/json"
	"fmt"
	"os"
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
	// etcd's own track record (tests/robustness/README.md): a single-member
	// cluster answered a write before its WAL entry was fsynced, so a crash
	// right after the answer lost it. A power loss (the lazyfs layer
	// dropping what was never fsynced) opens that window wide; kill -9
	// alone keeps the page cache.
	{Row: Row{Name: "etcd-14370-v3.5.0", Target: "etcd", Broken: true, Nemesis: "power-loss", Args: []string{"--version=v3.5.0", "--members=1", "--concurrency=10", "--time=40s"},
		Mode: "one member answers before its WAL is fsynced: acknowledged lock grants and writes lost at a crash"},
		Reproduces: "etcd [#14370](https://github.com/etcd-io/etcd/issues/14370), \"Durability API guarantee broken in single node cluster\" (Aug 2022; in v3.4 and earlier, fixed in v3.4.21 and v3.5.5 by [#14400](https://github.com/etcd-io/etcd/pull/14400)): on its robustness suite's track record"},
	{Row: Row{Name: "etcd-14370-v3.5.5", Target: "etcd", Nemesis: "power-loss", Args: []string{"--version=v3.5.5", "--members=1", "--concurrency=10", "--time=40s"},
		Mode: "the same single member at the fixed release"},
		Reproduces: "the fix of etcd #14370 (v3.5.5, [#14400](https://github.com/etcd-io/etcd/pull/14400))"},
	{Row: Row{Name: "etcd-mutex-3.5", Target: "etcd-mutex", Nemesis: "pause", Args: []string{"--version=3.5"},
		Mode: "etcd's client lock (concurrency.Mutex): a holder whose session's keep-alives stop loses the lock while it is told nothing"},
		Finding:    "lease_overlaps",
		Reproduces: "Jepsen, [etcd 3.4.3](https://jepsen.io/analyses/etcd-3.4.3) (2020): etcd's locks are not mutually exclusive (two holders at once); fenced by the token, so the verdict is valid and the overlap a finding"},
	{Row: Row{Name: "etcd-lock-3.7", Target: "etcd", Nemesis: "pause",
		Mode: "etcd with its lease-bound lock key and one Txn per write"},
		Reproduces: "the counterpart: the same cluster, fencing checked in the same transaction as the write"},
	// An object store as the resource (docs/s3.md): the check is a
	// conditional PUT on the ETag read, or it is a race. One hot key, so
	// writers meet between a check and a PUT.
	{Row: Row{Name: "s3-unconditional", Target: "s3-unconditional", Broken: true, Nemesis: "pause", Args: []string{"--keys=1"},
		Mode: "SeaweedFS's S3 gateway, token compared then a plain PUT: a paused or slower writer overwrites a newer token's object"},
		Reproduces: "Kleppmann, [How to do distributed locking](https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html) (2016): a storage service that does not check the token itself cannot be fenced; [Amazon S3 conditional writes](https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html) (`If-Match` on PUT, 2024) are the check"},
	{Row: Row{Name: "s3-if-match", Target: "s3", Nemesis: "pause", Args: []string{"--keys=1"},
		Mode: "the same store, each PUT conditional on the ETag its check read (a 412 read again, never accepted)"},
		Reproduces: "the counterpart of `s3-unconditional`"},
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

func parseDuration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
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

// TrackEntry is one row's measurement as docs/track-record.json keeps it:
// a run of some rows (ROWS=) keeps the others' last measurement.
type TrackEntry struct {
	Outcomes  []Outcome `json:"outcomes"`
	Measured  time.Time `json:"measured"`
	Time      string    `json:"time"`
	FirstSeed uint64    `json:"first_seed"`
	Seeds     int       `json:"seeds"`
	CPUs      int       `json:"cpus"`
	Command   string    `json:"command"`
}

// TrackFile is docs/track-record.json: every row's last measurement.
type TrackFile struct {
	Format string                `json:"format"`
	Rows   map[string]TrackEntry `json:"rows"`
}

const trackFormat = "fencecheck-track-record/1"

// trackJSON is where the measurements beside a track record are kept.
func trackJSON(out string) string { return strings.TrimSuffix(out, ".md") + ".json" }

// readTrackFile reads the kept measurements (none when there is no file
// or it is of another format).
func readTrackFile(path string) TrackFile {
	f := TrackFile{Format: trackFormat, Rows: map[string]TrackEntry{}}
	b, err := os.ReadFile(path)
	if err != nil {
		return f
	}
	var old TrackFile
	if json.Unmarshal(b, &old) == nil && old.Format == trackFormat && old.Rows != nil {
		for name, e := range old.Rows {
			if _, ok := trackRow(name); ok {
				f.Rows[name] = e
			}
		}
	}
	return f
}

// record puts m's rows' measurements into f, replacing theirs.
func (f *TrackFile) record(m *Matrix) {
	for _, r := range m.Rows {
		os := append([]Outcome(nil), m.Outcomes[r.Name]...)
		for i := range os {
			os[i].Dir = ""
		}
		f.Rows[r.Name] = TrackEntry{Outcomes: os, Measured: m.Started.UTC().Truncate(time.Second), Time: m.Config.Time.String(),
			FirstSeed: m.Config.FirstSeed, Seeds: m.Config.Seeds, CPUs: m.CPUs, Command: m.Config.Command}
	}
}

// matrix is f as a Matrix over every row it has, in the table's order.
func (f TrackFile) matrix(command string, interrupted bool) *Matrix {
	m := &Matrix{Config: Config{Command: command, Track: true}, Outcomes: map[string][]Outcome{}, Interrupted: interrupted}
	for _, t := range TrackRows {
		if e, ok := f.Rows[t.Name]; ok {
			m.Rows = append(m.Rows, t.Row)
			m.Outcomes[t.Name] = e.Outcomes
		}
	}
	return m
}

// TrackMarkdown renders docs/track-record.md from the kept measurements.
func (f TrackFile) TrackMarkdown(command string, interrupted bool) string {
	return f.matrix(command, interrupted).trackMarkdown(f)
}

// TrackMarkdown renders the table of m's runs alone.
func (m *Matrix) TrackMarkdown() string {
	f := TrackFile{Format: trackFormat, Rows: map[string]TrackEntry{}}
	f.record(m)
	return m.trackMarkdown(f)
}

func (m *Matrix) trackMarkdown(f TrackFile) string {
	var b strings.Builder
	c := m.Config
	fmt.Fprintf(&b, "# Track record\n\n<!-- Generated by cmd/matrix --track-record; do not edit by hand. -->\n\n")
	fmt.Fprintf(&b, "Real systems at real releases, each row a published issue or analysis that fencecheck re-finds "+
		"black-box, beside the correct counterpart that must stay valid. Regenerate with `make track-record` "+
		"(`ROWS=a,b` re-measures some rows and keeps the others' last measurement, kept in track-record.json; SEEDS and TIME override 3 and 20s); "+
		"a row whose verdict changes makes the command fail. The last command:\n\n    %s\n\n", c.Command)
	fmt.Fprintf(&b, "How measured: each row is `fencecheck test --target T --nemesis N --time TIME --seed S` with the row's flags, one run at a time, "+
		"on a shared 2-core machine (the measured column gives each row's seeds, time and date). The system column is what the runs said they ran (results.json `run.system`: "+
		"the Debian package's version, or the etcd release built here from the Go module proxy). **Found** counts the runs that showed what the row reproduces: "+
		"an invalid verdict for a broken row; for a finding row, a valid verdict with the finding (a lease overlap the token fenced off); for a correct row, a valid verdict.\n\n")
	fmt.Fprintf(&b, "| row | system (measured) | reproduces | faults | expected | found | verdicts | measured | |\n|---|---|---|---|---|---|---|---|---|\n")
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
		e := f.Rows[r.Name]
		length := e.Time
		for _, a := range r.Args {
			if v, ok := strings.CutPrefix(a, "--time="); ok {
				length = v // the row's own, which wins over the record's
			}
		}
		measured := fmt.Sprintf("seeds %d..%d × %s, %s", e.FirstSeed, e.FirstSeed+uint64(e.Seeds)-1, length, e.Measured.Format("2006-01-02 15:04 UTC"))
		fmt.Fprintf(&b, "| `%s`: %s | %s | %s | %s | %s | %d/%d | %s | %s | %s |\n", r.Name, r.Mode, cmpOr(strings.Join(sys, "; "), "–"),
			t.Reproduces, faults, t.expected(), found, len(os), countList(verdicts), measured, mark)
	}
	fmt.Fprintf(&b, "\n## Runs to look at\n\n")
	listed := false
	for _, r := range m.Rows {
		t, _ := trackRow(r.Name)
		for _, o := range m.Outcomes[r.Name] {
			if !t.found(o) {
				listed = true
				rc := Config{Time: parseDuration(f.Rows[r.Name].Time)}
				fmt.Fprintf(&b, "- %s, seed %d: exit %d, verdict %q%s. Reproduce: `fencecheck %s`\n", r.Name, o.Seed, o.Exit, o.Verdict, errSuffix(o),
					strings.Join(rc.Args(r, o.Seed, "store"), " "))
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
