package oracle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencecheck/fencecheck/history"
)

// A case is one file of testdata/: a history whose first line (after an
// optional byte-order mark) is an "oracle-case" annotation event naming the
// issue-12 bullet, the expected answer and the flags to check it with.
type testCase struct {
	file    string
	history []byte
	Bullet  string   `json:"bullet"`
	Expect  string   `json:"expect"`
	Line    int      `json:"error_line"`
	Note    string   `json:"note"`
	Flags   []string `json:"flags"`
	sem     Semantics
	args    []string // flags other than the semantics'
}

func loadCases(t *testing.T) []testCase {
	files, err := filepath.Glob("testdata/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	var cases []testCase
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := bytes.Cut(bytes.TrimPrefix(b, bom), []byte("\n"))
		var ann struct {
			F     string          `json:"f"`
			Extra json.RawMessage `json:"extra"`
		}
		c := testCase{file: filepath.Base(f), history: b}
		if err := json.Unmarshal(first, &ann); err != nil || ann.F != "oracle-case" || json.Unmarshal(ann.Extra, &c) != nil {
			t.Fatalf("%s: the first line must be an oracle-case annotation: %v", f, err)
		}
		for i := 0; i < len(c.Flags); i++ {
			switch c.Flags[i] {
			case "--authenticated":
				c.sem.Authenticated = true
			case "--equal":
				i++
				c.sem.EqualAccept = c.Flags[i] == "accept"
			case "--scope":
				i++
				c.sem.GlobalScope = c.Flags[i] == "global"
			default:
				c.args = append(c.args, c.Flags[i])
			}
		}
		cases = append(cases, c)
	}
	return cases
}

// The oracle gives every case the answer its annotation states, and the
// README lists every case.
func TestCasesOracle(t *testing.T) {
	readme, err := os.ReadFile("testdata/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range loadCases(t) {
		got, err := Expect(c.history, c.sem)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if got.Verdict != c.Expect || got.Line != c.Line {
			t.Errorf("%s: oracle says %s (line %d: %s), the case expects %s (line %d)", c.file, got.Verdict, got.Line, got.Output, c.Expect, c.Line)
		}
		if !bytes.Contains(readme, []byte(c.file)) {
			t.Errorf("testdata/README.md does not list %s", c.file)
		}
	}
}

// knownWrong lists, per case and checker (fencecheck check --checker
// MODE), the answers known to differ from the oracle's, each with why. It
// is empty: every checker agrees with the oracle on every case (issue 12).
// An entry whose case starts agreeing fails the test until it is removed,
// so the list stays true.
var knownWrong = map[string]string{}

func TestCasesCLI(t *testing.T) {
	bin := fencecheckBinary(t)
	for _, c := range loadCases(t) {
		want, _ := Expect(c.history, c.sem)
		for _, mode := range []string{"both", "fast", "porcupine"} {
			args := append([]string{"--checker", mode, "--min-ops", "0"}, c.args...)
			got := CLI(bin, args...)(c.history, c.sem)
			key := c.file + " " + mode
			bullet, known := knownWrong[key]
			switch agree := Agree(want, got); {
			case !agree && !known:
				t.Errorf("%s: fencecheck check says %s (line %d), the oracle %s (line %d) [%s]\n%s", key, got.Verdict, got.Line, want.Verdict, want.Line, c.Bullet, strings.TrimSpace(got.Output))
			case agree && known:
				t.Errorf("%s: now agrees with the oracle (%s): remove it from knownWrong (%s)", key, want.Verdict, bullet)
			case known:
				t.Logf("%s: known (%s): check says %s, the oracle %s", key, bullet, got.Verdict, want.Verdict)
			}
		}
	}
}

// expectKnown fails when a known-wrong behaviour (an issue-12 bullet) is
// fixed without its knownWrong entry being removed, and when anything not
// known is wrong.
func expectKnown(t *testing.T, key string, ok bool, format string, args ...any) {
	t.Helper()
	bullet, known := knownWrong[key]
	switch {
	case !ok && !known:
		t.Errorf(key+": "+format, args...)
	case ok && known:
		t.Errorf("%s: now right: remove it from knownWrong (%s)", key, bullet)
	case known:
		t.Logf("%s: known (%s): "+format, append([]any{key, bullet}, args...)...)
	}
}

// Two keys whose names sanitize alike each get their own Porcupine page.
func TestCasesDistinctPages(t *testing.T) {
	bin := fencecheckBinary(t)
	for _, c := range loadCases(t) {
		if c.file != "keys-a-slash-b-and-a_b.jsonl" {
			continue
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "h.jsonl")
		if err := os.WriteFile(path, c.history, 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command(bin, "check", "--min-ops", "0", "--report", filepath.Join(dir, "out"), path).CombinedOutput()
		pages, _ := filepath.Glob(filepath.Join(dir, "out", "porcupine", "fenced-register-*.html"))
		expectKnown(t, c.file+" report", len(pages) == 2, "%d fenced-register Porcupine pages for the two invalid keys a/b and a_b, want 2: %v\n%s", len(pages), pages, out)
		return
	}
	t.Fatal("case keys-a-slash-b-and-a_b.jsonl is missing")
}

// Protocol-legal values (1 MiB, of '<', '>', '&' and control bytes, and of
// control bytes only: the longest line the recorder can write for one
// value) survive history.Recorder and history.Reader, and fencecheck check
// reads the file the recorder wrote.
func TestRecorderRoundTrip(t *testing.T) {
	const alphabet = "<>&\x00\x01\x02\x07\x08\t\n\x0b\x0c\r\x1b\x1f\x7f"
	mixed := make([]byte, 1<<20)
	for i := range mixed {
		mixed[i] = alphabet[i%len(alphabet)]
	}
	values := []string{string(mixed), strings.Repeat("\x01", 1<<20)}
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	for i, v := range values {
		key := fmt.Sprintf("k%d", i)
		rec.Record(history.Event{Process: 0, Type: history.Invoke, F: history.Write, Key: key, Token: "1", Value: v})
		rec.Record(history.Event{Process: 0, Type: history.Ok, F: history.Write, Key: key, Token: "1", Value: v})
		rec.Record(history.Event{Process: 1, Type: history.Invoke, F: history.Read, Key: key})
		rec.Record(history.Event{Process: 1, Type: history.Ok, F: history.Read, Key: key, Token: "1", Value: v})
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	written := buf.Bytes()

	evs, err := history.ReadAll(bytes.NewReader(written))
	ok := err == nil && len(evs) == 4*len(values)
	for i := range values {
		ok = ok && evs[4*i+3].Value == values[i]
	}
	longest := 0
	for _, l := range bytes.Split(written, []byte("\n")) {
		longest = max(longest, len(l))
	}
	expectKnown(t, "recorder round trip", ok, "read back %d events (err %v); the longest line is %d bytes for a %d-byte value", len(evs), err, longest, 1<<20)

	// The oracle reads it too, and finds it valid.
	if res, err := Check(written, Semantics{}); err != nil || res.Verdict != Valid {
		t.Errorf("oracle on the recorded history: %v %v", res, err)
	}
	bin := fencecheckBinary(t)
	got := CLI(bin, "--min-ops", "0")(written, Semantics{})
	expectKnown(t, "recorder round trip check", got.Verdict == "valid", "fencecheck check says %s: %s", got.Verdict, strings.TrimSpace(got.Output))
}
