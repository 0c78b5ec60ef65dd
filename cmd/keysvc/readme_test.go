package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadmeQuickStart runs the README's quick start as a new user
// would, against a `keysvc serve --dev` started as the README says: the
// shell lines of the block after the "quick start" marker, in a fresh
// directory, with only the listener address changed (the test's server
// listens on a free port, not 8080) and `go build` replaced by a copy of
// the binary this test built. They must reach a verified receipt with no
// jq (issue 16).
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	if !strings.Contains(text, "\n```sh\ngo run ./cmd/keysvc serve --dev\n```\n") {
		t.Fatal("README's quick start no longer starts with `go run ./cmd/keysvc serve --dev` alone in its block")
	}
	const marker = "<!-- quick start: from a signature to a verified receipt -->\n```sh\n"
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatal("README has no quick-start receipt block")
	}
	block := text[i+len(marker):]
	block = block[:strings.Index(block, "```")]
	if strings.Contains(block, "jq") {
		t.Error("the quick start needs jq")
	}
	const build = "go build -o keysvc ./cmd/keysvc\n"
	if !strings.HasPrefix(block, build) {
		t.Fatalf("the block does not start with %q:\n%s", build, block)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is not installed")
		}
		t.Skip("SKIPPING README quick start: curl is not installed")
	}

	work := t.TempDir()
	srv := startServer(t, nil, "--dev", "--data-dir", filepath.Join(work, "keysvc-data"))
	script := "set -eu\ncp '" + keysvcBinary(t) + "' keysvc\n" + strings.TrimPrefix(block, build)
	script = strings.ReplaceAll(script, "http://127.0.0.1:8080", srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "KEYSVC_TOKEN=", "KEYSVC_SERVER=", "KEYSVC_DATA_DIR=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README quick start failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "receipt valid, fully verified: 1 of 1 attestations verified") {
		t.Fatalf("README quick start did not verify the receipt:\n%s", out)
	}
	if !strings.Contains(text, "`receipt valid, fully verified: 1 of 1 attestations\nverified`") {
		t.Error("README no longer says what the last command prints")
	}
}
