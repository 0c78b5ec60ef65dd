package verifier

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/keysvc/keysvc/internal/testvectors"
)

// receiptVector is one file of ../shared/vectors/vrp-receipt-v1.
type receiptVector struct {
	Name     string          `json:"name"`
	Now      string          `json:"now"`
	JWKS     json.RawMessage `json:"jwks"`
	Receipt  json.RawMessage `json:"receipt"`
	Expected json.RawMessage `json:"expected"`
}

// loadReceiptVectors reads every vrp-receipt-v1/NN-*.json vector.
func loadReceiptVectors(t testing.TB) map[string]receiptVector {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testvectors.Dir(t), "vrp-receipt-v1", "[0-9][0-9]-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 7 {
		t.Fatalf("found %d receipt vectors, want at least 7", len(files))
	}
	out := map[string]receiptVector{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v receiptVector
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = v
	}
	return out
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("unmarshal %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestReceiptVectors(t *testing.T) {
	for file, v := range loadReceiptVectors(t) {
		t.Run(file, func(t *testing.T) {
			now, err := time.Parse(time.RFC3339, v.Now)
			if err != nil {
				t.Fatal(err)
			}
			set, err := ParseJWKS(v.JWKS)
			if err != nil {
				t.Fatal(err)
			}
			if len(set.Skipped) != 0 {
				t.Fatalf("vector keys skipped: %v", set.Skipped)
			}
			res := VerifyReceipt(context.Background(), v.Receipt, Options{Now: now, Resolve: StaticJWKS(set)})
			got, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, got, v.Expected) {
				t.Errorf("%s:\n got  %s\n want %s", v.Name, got, v.Expected)
			}
		})
	}
}
