// Package testvectors locates the shared test vectors (../shared/vectors
// relative to the module root) for tests. The vectors were written outside
// this project; tests must match them exactly and never edit them.
package testvectors

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the vectors directory: $KEYSVC_VECTORS_DIR if set, otherwise
// ../shared/vectors beside the module root. The test fails when missing.
func Dir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("KEYSVC_VECTORS_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			v := filepath.Join(d, "..", "shared", "vectors")
			if _, err := os.Stat(v); err != nil {
				t.Fatalf("test vectors not found at %s (set KEYSVC_VECTORS_DIR): %v", v, err)
			}
			return v
		}
		if filepath.Dir(d) == d {
			t.Fatal("go.mod not found above " + wd)
		}
	}
}

// Read returns the contents of a file under Dir, by relative path.
func Read(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SEP2828V1 is sep2828-v1-authorization-binding.json: the
// tools_call_params_plus_meta_authorization_binding_v1 projection's cases,
// each with the tools/call params and either the exact projection bytes
// and digest or the fails_closed error.
type SEP2828V1 struct {
	Projection string `json:"projection"`
	Cases      []struct {
		ID       string          `json:"id"`
		Params   json.RawMessage `json:"params"`
		Expected struct {
			ProjectionBytes string `json:"projection_bytes"`
			Digest          string `json:"digest"`
			Error           string `json:"error"`
		} `json:"expected"`
	} `json:"cases"`
}

// ReadSEP2828V1 reads and decodes the SEP-2828 v1 vectors.
func ReadSEP2828V1(t testing.TB) SEP2828V1 {
	t.Helper()
	var v SEP2828V1
	if err := json.Unmarshal(Read(t, "sep2828-v1-authorization-binding.json"), &v); err != nil {
		t.Fatalf("sep2828-v1-authorization-binding.json: %v", err)
	}
	return v
}
