package fencecheck_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// layers is the project's layering, bottom first (README.md, "Layout"). A
// package belongs to the layer of the longest folder that names it; it may
// import packages of lower layers, and packages of its own folder tree (a
// package and its subpackages), never a package of its own layer in another
// folder or of a higher layer. Tests obey the same rule.
var layers = [][]string{
	{"history", "durable"},
	{"fencing"},
	{"workloads", "nemesis", "checkers"},
	{"analysis"},
	{"reports"},
	{"harness"},
	{"targets"},
	{"gate"},
	{"cmd"},
}

const module = "github.com/fencecheck/fencecheck"

// placeOf returns the layer and the top folder of a project package path
// (relative to the module).
func placeOf(t *testing.T, rel string) (layer int, folder string) {
	top, _, _ := strings.Cut(rel, "/")
	for i, l := range layers {
		for _, f := range l {
			if f == top {
				return i, top
			}
		}
	}
	t.Fatalf("package %s is in no layer: add its folder to the layers table and to README.md's Layout", rel)
	return 0, ""
}

func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue // the module root: this test
		}
		layer, folder := placeOf(t, rel)
		for kind, imps := range map[string][]string{"imports": p.Imports, "test imports": append(p.TestImports, p.XTestImports...)} {
			for _, imp := range imps {
				irel, ok := strings.CutPrefix(imp, module+"/")
				if !ok || irel == rel {
					continue
				}
				checked++
				ilayer, ifolder := placeOf(t, irel)
				if ifolder == folder {
					continue
				}
				if ilayer >= layer {
					t.Errorf("%s %s %s: %s is layer %d (%v), not below layer %d (%v)", rel, kind, irel, ifolder, ilayer, layers[ilayer], layer, layers[layer])
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d project imports seen: go list output not understood", checked)
	}
}

// The layering itself: the ground packages import nothing of the project
// but each other (fencing imports history and durable).
func TestGroundPackagesStandAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./history", "./durable", "./fencing").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, module+"/")
		if ok && rel != "history" && rel != "durable" && rel != "fencing" {
			t.Errorf("history, durable and fencing must import nothing of the project but history and durable; they depend on %s", rel)
		}
	}
}

// Command-line flags are the commands' own: the run engine says what its
// settings are (harness.Config.Settings), cmd/ binds them to flags.
func TestFlagLibrariesOnlyInCmd(t *testing.T) {
	out, err := exec.Command("go", "list", "-test", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel, ok := strings.CutPrefix(fields[0], module+"/")
		if !ok || strings.HasPrefix(rel, "cmd/") {
			continue
		}
		checked++
		for _, d := range fields[1:] {
			if d == "github.com/spf13/pflag" || d == "github.com/spf13/cobra" {
				t.Errorf("%s depends on %s: flags are bound in cmd/", fields[0], d)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d packages checked: go list output not understood", checked)
	}
}
