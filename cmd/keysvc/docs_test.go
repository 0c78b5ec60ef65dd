package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestGeneratedDocs fails when the committed CLI reference (docs/cli,
// docs/cli/man) or the README's serve flag table differs from what the
// command definitions generate: a flag, default, variable or description
// the docs misdescribe, or a command they lack or still list (ADR 0030).
func TestGeneratedDocs(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "KEYSVC_") {
			t.Setenv(name, "") // flag defaults read them; empty is unset to envOr
		}
	}
	files, err := generateDocs()
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join("..", "..")
	const fix = "run `go generate ./cmd/keysvc` and commit the result"
	var names []string
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		want := files[name]
		got, err := os.ReadFile(filepath.Join(repo, name))
		if err != nil {
			t.Errorf("%s: %v (%s)", name, err, fix)
			continue
		}
		if name == readmeFile {
			if got, err = readmeTable(got); err != nil {
				t.Errorf("%v (%s)", err, fix)
				continue
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the command definitions (%s); first difference:\n%s", name, fix, firstDiff(string(got), string(want)))
		}
	}
	for _, dir := range []string{docsCLIDir, docsManDir} {
		committed, _ := filepath.Glob(filepath.Join(repo, dir, "keysvc*"))
		for _, c := range committed {
			rel := dir + "/" + filepath.Base(c)
			if _, ok := files[rel]; !ok {
				t.Errorf("%s documents no command that exists (%s)", rel, fix)
			}
		}
	}
}

// firstDiff shows the first line that differs, committed then generated.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  committed: %s\n  generated: %s", i+1, gl, wl)
		}
	}
	return "(line endings)"
}
