package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/keysvc/keysvc/internal/testvectors"
)

// receiptVectorExit is the exit status keysvc verify must give each shared
// receipt vector.
var receiptVectorExit = map[string]int{
	"01-offer-transport-verified.json":     0,
	"02-partial-payment-unverifiable.json": 2,
	"03-tampered-signature.json":           2,
	"04-expired-window.json":               2,
	"05-unsupported-version.json":          1,
	"06-malformed-empty-attestations.json": 1,
	"07-unparseable-validity-window.json":  2,
}

type cliVector struct {
	Now      string          `json:"now"`
	JWKS     json.RawMessage `json:"jwks"`
	Receipt  json.RawMessage `json:"receipt"`
	Expected json.RawMessage `json:"expected"`
}

// TestVerifyCommand runs `keysvc verify` from the built binary
// (keysvcBinary, built once per test run) as a user would: on every shared
// receipt vector, with --jwks as a file and as an http URL, from stdin, and
// with usage errors.
func TestVerifyCommand(t *testing.T) {
	bin := keysvcBinary(t)
	run := func(t *testing.T, stdin []byte, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			t.Fatalf("run %v: %v", args, err)
		}
		return o.String(), e.String(), code
	}
	write := func(t *testing.T, name string, b []byte) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sameJSON := func(t *testing.T, got string, want []byte) {
		t.Helper()
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, got)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("stdout:\n%s\nwant %s", got, want)
		}
	}

	files, err := filepath.Glob(filepath.Join(testvectors.Dir(t), "vrp-receipt-v1", "[0-9][0-9]-*.json"))
	if err != nil || len(files) < len(receiptVectorExit) {
		t.Fatalf("receipt vectors: %v (found %d)", err, len(files))
	}
	vectors := map[string]cliVector{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v cliVector
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		vectors[filepath.Base(f)] = v
	}

	for name, v := range vectors {
		t.Run("vector/"+name, func(t *testing.T) {
			wantCode, ok := receiptVectorExit[name]
			if !ok {
				t.Fatalf("no expected exit status for new vector %s", name)
			}
			receipt := write(t, "receipt.json", v.Receipt)
			jwks := write(t, "jwks.json", v.JWKS)
			stdout, stderr, code := run(t, nil, "verify", receipt, "--jwks", jwks, "--now", v.Now, "--json")
			if code != wantCode {
				t.Errorf("exit %d, want %d; stderr %s", code, wantCode, stderr)
			}
			sameJSON(t, stdout, v.Expected)
		})
	}

	v01 := vectors["01-offer-transport-verified.json"]
	v02 := vectors["02-partial-payment-unverifiable.json"]

	t.Run("jwks from http URL", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/.well-known/jwks.json" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_, _ = w.Write(v01.JWKS)
		}))
		defer srv.Close()
		if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
			t.Fatalf("unexpected server URL %s", srv.URL)
		}
		receipt := write(t, "receipt.json", v01.Receipt)

		stdout, stderr, code := run(t, nil, "verify", receipt, "--jwks", srv.URL+"/.well-known/jwks.json", "--now", v01.Now, "--json")
		if code != 0 {
			t.Errorf("exit %d, want 0; stderr %s", code, stderr)
		}
		sameJSON(t, stdout, v01.Expected)

		_, stderr, code = run(t, nil, "verify", receipt, "--jwks", srv.URL+"/missing.json", "--now", v01.Now, "--json")
		if code != 1 || !strings.Contains(stderr, "404") {
			t.Errorf("HTTP 404: exit %d, stderr %q; want exit 1 naming the status", code, stderr)
		}
	})

	t.Run("receipt from stdin", func(t *testing.T) {
		jwks := write(t, "jwks.json", v02.JWKS)
		stdout, stderr, code := run(t, v02.Receipt, "verify", "-", "--jwks", jwks, "--now", v02.Now, "--json")
		if code != 2 {
			t.Errorf("exit %d, want 2; stderr %s", code, stderr)
		}
		sameJSON(t, stdout, v02.Expected)
	})

	t.Run("table output", func(t *testing.T) {
		jwks := write(t, "jwks.json", v02.JWKS)
		stdout, _, code := run(t, v02.Receipt, "verify", "-", "--jwks", jwks, "--now", v02.Now)
		if code != 2 {
			t.Errorf("exit %d, want 2", code)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 4 ||
			strings.Join(strings.Fields(lines[0]), " ") != "INDEX LAYER STATUS ERROR KID" ||
			strings.Join(strings.Fields(lines[1]), " ") != "0 offer verified - vrp-vectors-2026-01-01-01" ||
			strings.Join(strings.Fields(lines[2]), " ") != "1 payment unverifiable layer_unverifiable -" ||
			lines[3] != "receipt valid, not fully verified: 1 of 2 attestations verified" {
			t.Errorf("table:\n%s", stdout)
		}
	})

	t.Run("usage and I/O errors exit 1", func(t *testing.T) {
		receipt := write(t, "receipt.json", v01.Receipt)
		jwks := write(t, "jwks.json", v01.JWKS)
		for _, c := range []struct {
			name string
			args []string
		}{
			{"no --jwks", []string{"verify", receipt}},
			{"no receipt", []string{"verify", "--jwks", jwks}},
			{"bad --now", []string{"verify", receipt, "--jwks", jwks, "--now", "yesterday"}},
			{"missing receipt file", []string{"verify", filepath.Join(t.TempDir(), "nope.json"), "--jwks", jwks}},
			{"missing jwks file", []string{"verify", receipt, "--jwks", filepath.Join(t.TempDir(), "nope.json")}},
			{"jwks not a JWK Set", []string{"verify", receipt, "--jwks", receipt}},
		} {
			t.Run(c.name, func(t *testing.T) {
				stdout, stderr, code := run(t, nil, c.args...)
				if code != 1 || stdout != "" || stderr == "" {
					t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 with a message on stderr", code, stdout, stderr)
				}
			})
		}
	})
}
