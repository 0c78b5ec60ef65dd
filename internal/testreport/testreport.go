// Package testreport reads `go test -json` output (cmd/test2json events)
// and reports what plain `go test` hides: every skipped test with its
// reason, checked against an allowlist, so that CI fails on a skip nobody
// expected (issue 16: a missing dependency must not pass silently).
package testreport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// Event is one cmd/test2json event (go doc cmd/test2json).
type Event struct {
	Time    time.Time `json:"Time"`
	Action  string    `json:"Action"` // start, run, pause, cont, pass, bench, fail, output, skip, build-output, build-fail
	Package string    `json:"Package"`
	Test    string    `json:"Test"`
	Elapsed float64   `json:"Elapsed"` // seconds
	Output  string    `json:"Output"`
}

// Test is the outcome of one test (or subtest, Name "TestX/sub").
type Test struct {
	Package string
	Name    string
	Action  string // pass, fail, skip
	// Output is everything the test printed, in order ("=== RUN" and
	// "--- SKIP" lines included).
	Output string
}

// Reason is the skip message: the test's last output line that is not a
// "=== " or "--- " framing line, trimmed ("" when none).
func (t Test) Reason() string {
	lines := strings.Split(strings.TrimRight(t.Output, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		return l
	}
	return ""
}

// Report is the outcome of a `go test -json` run.
type Report struct {
	Tests []Test
	// Packages maps each package to pass, fail or skip (no test files).
	Packages map[string]string
	// Other holds lines that were not JSON events (build errors printed
	// by go test itself), in order.
	Other []string
}

// Read consumes `go test -json` output from r. pass, when not nil,
// receives what a human reads in plain `go test` output, as it comes: the
// package result lines, the whole output of each failing test and the
// framing and reason of each skipped one.
func Read(r io.Reader, pass io.Writer) (*Report, error) {
	rep := &Report{Packages: map[string]string{}}
	outs := map[[2]string]*strings.Builder{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev Event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			rep.Other = append(rep.Other, string(line))
			if pass != nil {
				fmt.Fprintln(pass, string(line))
			}
			continue
		}
		k := [2]string{ev.Package, ev.Test}
		switch ev.Action {
		case "output", "build-output":
			if ev.Test == "" {
				// Package-level output: "ok  pkg 1.2s", "FAIL", "PASS",
				// build errors, panics outside tests.
				if pass != nil && !strings.HasPrefix(ev.Output, "=== ") && ev.Output != "PASS\n" {
					io.WriteString(pass, ev.Output)
				}
				continue
			}
			b := outs[k]
			if b == nil {
				b = &strings.Builder{}
				outs[k] = b
			}
			b.WriteString(ev.Output)
		case "pass", "fail", "skip":
			if ev.Test == "" {
				rep.Packages[ev.Package] = ev.Action
				continue
			}
			t := Test{Package: ev.Package, Name: ev.Test, Action: ev.Action}
			if b := outs[k]; b != nil {
				t.Output = b.String()
				delete(outs, k)
			}
			rep.Tests = append(rep.Tests, t)
			if pass != nil && ev.Action != "pass" {
				if ev.Action == "fail" {
					io.WriteString(pass, t.Output)
				} else {
					fmt.Fprintf(pass, "--- SKIP: %s (%s): %s\n", t.Name, ev.Package, t.Reason())
				}
			}
		case "build-fail":
			rep.Packages[ev.Package] = "fail"
		}
	}
	return rep, sc.Err()
}

// Skipped returns the skipped tests, sorted by package and name.
func (r *Report) Skipped() []Test {
	var out []Test
	for _, t := range r.Tests {
		if t.Action == "skip" {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Package != out[j].Package {
			return out[i].Package < out[j].Package
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Failed reports whether any test or package failed.
func (r *Report) Failed() bool {
	for _, a := range r.Packages {
		if a == "fail" {
			return true
		}
	}
	for _, t := range r.Tests {
		if t.Action == "fail" {
			return true
		}
	}
	return false
}

// Allow is one allowlist entry: a package (module-relative path, e.g.
// "backends/awskms", or a path.Match pattern) and a test name pattern
// (path.Match, e.g. "TestLive*"; "TestX/sub" for a subtest), with why the
// test may skip in CI.
type Allow struct {
	Package, Test, Why string
}

// ParseAllowlist reads lines "PACKAGE TEST  # why"; blank lines and lines
// starting with # are ignored. Every entry needs a why.
func ParseAllowlist(r io.Reader) ([]Allow, error) {
	var out []Allow
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		spec, why, _ := strings.Cut(line, "#")
		f := strings.Fields(spec)
		if len(f) != 2 || strings.TrimSpace(why) == "" {
			return nil, fmt.Errorf("allowlist line %d: want \"PACKAGE TEST  # why\", got %q", n, line)
		}
		for _, p := range f {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("allowlist line %d: bad pattern %q: %v", n, p, err)
			}
		}
		out = append(out, Allow{Package: f[0], Test: f[1], Why: strings.TrimSpace(why)})
	}
	return out, sc.Err()
}

// Allowed returns the entry allowing t to skip, or nil. module is the
// module path trimmed from t.Package ("github.com/keysvc/keysvc").
func Allowed(allow []Allow, module string, t Test) *Allow {
	pkg := strings.TrimPrefix(strings.TrimPrefix(t.Package, module), "/")
	for i, a := range allow {
		pm, _ := path.Match(a.Package, pkg)
		tm, _ := path.Match(a.Test, t.Name)
		if pm && tm {
			return &allow[i]
		}
	}
	return nil
}
