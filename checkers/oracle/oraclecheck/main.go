// Command oraclecheck judges a small history with the oracle (package
// checkers/oracle), or prints a generated one.
//
//	oraclecheck [--equal accept] [--scope global] [--authenticated] HISTORY.jsonl
//	oraclecheck --generate SEED
//
// Exit codes: 0 valid, 1 invalid, 2 too big for the oracle, 64 usage error
// or unreadable history (with its line).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/fencecheck/fencecheck/checkers/oracle"
)

func main() {
	fs := flag.NewFlagSet("oraclecheck", flag.ContinueOnError)
	equal := fs.String("equal", "reject", "a token equal to the high-water mark: reject or accept")
	scope := fs.String("scope", "per-lock", "token scope: per-lock or global")
	auth := fs.Bool("authenticated", false, "the target seals tokens")
	gen := fs.Int64("generate", -1, "print generated history SEED (its flags on stderr) instead of checking")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: oraclecheck [--equal accept] [--scope global] [--authenticated] HISTORY.jsonl\n       oraclecheck --generate SEED")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(64)
	}
	if *gen >= 0 {
		g := oracle.Generate(uint64(*gen))
		os.Stdout.Write(g.History)
		fmt.Fprintf(os.Stderr, "flags: %s\nlabel: %s\n", strings.Join(g.Sem.Flags(), " "), g.Label)
		return
	}
	if fs.NArg() != 1 || (*equal != "reject" && *equal != "accept") || (*scope != "per-lock" && *scope != "global") {
		fs.Usage()
		os.Exit(64)
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "oraclecheck:", err)
		os.Exit(64)
	}
	res, err := oracle.Check(data, oracle.Semantics{EqualAccept: *equal == "accept", GlobalScope: *scope == "global", Authenticated: *auth})
	var ie *oracle.InputError
	if errors.As(err, &ie) {
		fmt.Fprintf(os.Stderr, "oraclecheck: %s: %v\n", fs.Arg(0), err)
		os.Exit(64)
	}
	fmt.Println(res)
	for _, p := range res.Partitions {
		fmt.Printf("  %-15s %-10s %3d ops  %s\n", p.Model, p.Key, p.Ops, p.Verdict)
	}
	switch res.Verdict {
	case oracle.Valid:
		os.Exit(0)
	case oracle.Invalid:
		os.Exit(1)
	}
	os.Exit(2)
}
