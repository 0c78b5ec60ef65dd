// Command skipcheck reads `go test -json` on standard input, writes what
// a human reads of it (package results, failing tests' output, every skip
// with its reason) to standard output, then lists every skipped test and
// exits 1 when a test failed or a test skipped that the allowlist does not
// name (CI: .ci/run; issue 16).
//
//	go test -json -race ./... 2>&1 | go run ./internal/testreport/skipcheck -allow .ci/allowed-skips
//
// Exit status: 0 no failure and only allowed skips; 1 a failure or an
// unexpected skip; 2 a usage error (the allowlist cannot be read).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/keysvc/keysvc/internal/testreport"
)

func main() {
	allowFile := flag.String("allow", ".ci/allowed-skips", "allowlist of tests that may skip: lines \"PACKAGE TEST  # why\"")
	module := flag.String("module", "github.com/keysvc/keysvc", "module path trimmed from package names before matching")
	flag.Parse()
	f, err := os.Open(*allowFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(2)
	}
	allow, err := testreport.ParseAllowlist(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(2)
	}
	rep, err := testreport.Read(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck: reading go test -json:", err)
		os.Exit(1)
	}
	skipped := rep.Skipped()
	unexpected := 0
	fmt.Printf("\n== skipped tests: %d\n", len(skipped))
	for _, t := range skipped {
		if a := testreport.Allowed(allow, *module, t); a != nil {
			fmt.Printf("allowed     %s %s: %s (allowlist: %s)\n", t.Package, t.Name, t.Reason(), a.Why)
			continue
		}
		unexpected++
		fmt.Printf("UNEXPECTED  %s %s: %s\n", t.Package, t.Name, t.Reason())
	}
	code := 0
	if unexpected > 0 {
		fmt.Printf("%d unexpected skip(s): install what the test needs, or add it to %s with why it may skip in CI\n", unexpected, *allowFile)
		code = 1
	}
	if rep.Failed() {
		fmt.Println("tests FAILED (see above)")
		code = 1
	}
	os.Exit(code)
}
