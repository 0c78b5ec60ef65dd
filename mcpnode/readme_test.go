package mcpnode_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMESnippet: the README's "Sign every tool call of your MCP
// server" is ExampleSigner_Install's code (so it compiles), under 20 lines.
func TestREADMESnippet(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Sign every tool call of your MCP server\n")
	if !ok {
		t.Fatal("README has no \"Sign every tool call of your MCP server\" section")
	}
	_, block, _ := strings.Cut(section, "```go\n")
	block, _, _ = strings.Cut(block, "```\n")

	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, ex, _ := strings.Cut(string(src), "// --- README snippet: begin ---\n")
	ex, _, _ = strings.Cut(ex, "\t// --- README snippet: end ---")
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(ex, "\n"), "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	want := strings.Join(lines, "\n") + "\n"
	if block != want {
		t.Fatalf("README snippet differs from ExampleSigner_Install:\n--- README\n%s--- example\n%s", block, want)
	}
	if n := strings.Count(block, "\n"); n >= 20 {
		t.Fatalf("README snippet has %d lines, want under 20", n)
	}
}
